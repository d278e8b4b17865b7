#!/usr/bin/env python3
"""The checks that keep the crates in layers (issue 41), run by scripts/test.sh:

1. No module import cycle inside any crate. Module A imports module B when A's code names
   an item that B owns: in a `use` declaration or in a path (`crate::b::X`, `super::X`,
   `b::f()`). Declaring a child (`mod b;`) is not an import; naming an item the parent
   defines (`super::Item`) is. A name re-exported with `use` is followed to the module
   that defines it, so a parent's `pub use child::X` seen from a sibling is an import of
   the child, not of the parent.
2. No `.rs` file under crates/*/src longer than 900 lines.
3. No function longer than 150 lines in `server` or `edge`, parsers excepted (the list
   below names them and why); `#[test]` functions (tables of cases) are not counted.

It reads the source as tokens (comments and literals stripped); it does not expand macros,
so a path that only a macro writes is not seen. `cargo-modules` can say the same from
rust-analyzer's view, but building it takes longer on two cores than the whole test suite.

Usage: scripts/layering.py [ROOT]   (ROOT defaults to the repository); exits 1 on a finding.
"""

import os
import re
import sys

MAX_FILE_LINES = 900
MAX_FN_LINES = 150
FN_CHECK_CRATES = ("server", "edge")
# Functions allowed over MAX_FN_LINES: parsers, whose one long match over the input reads
# best in one place. "crate/path/file.rs:function".
LONG_FN_ALLOWED = set()

KEYWORDS_DEFINING = {"fn", "struct", "enum", "trait", "type", "const", "static", "union"}


class Token:
    __slots__ = ("text", "line")

    def __init__(self, text, line):
        self.text = text
        self.line = line

    def __repr__(self):
        return f"{self.text}@{self.line}"


IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def tokenize(src):
    """Identifiers, `::` and single punctuation characters, with comments and literals
    dropped (a literal becomes the token `"`)."""
    tokens = []
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if src[i] == "\n":
                        line += 1
                    i += 1
        elif c in "rb" and re.match(r"(br|r)#*\"", src[i:i + 260]):
            m = re.match(r"(br|r)(#*)\"", src[i:])
            close = '"' + m.group(2)
            j = src.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            line += src.count("\n", i, j)
            tokens.append(Token('"', line))
            i = j
        elif c == '"' or (c == "b" and i + 1 < n and src[i + 1] == '"'):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            line += src.count("\n", i, j)
            tokens.append(Token('"', line))
            i = j + 1
        elif c == "'" or (c == "b" and i + 1 < n and src[i + 1] == "'"):
            j = i + (2 if c == "b" else 1)
            # a char literal: an escape or one character, then a quote; else a lifetime
            m = re.match(r"(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'", src[j:j + 12])
            if m:
                tokens.append(Token('"', line))
                i = j + len(m.group(0))
            else:
                m = IDENT.match(src, j)
                i = m.end() if m else j
        elif c.isalpha() or c == "_":
            m = IDENT.match(src, i)
            tokens.append(Token(m.group(0), line))
            i = m.end()
        elif c.isdigit():
            m = re.match(r"[0-9][0-9A-Za-z_.]*", src[i:])
            i += len(m.group(0))
        elif src.startswith("::", i):
            tokens.append(Token("::", line))
            i += 2
        else:
            tokens.append(Token(c, line))
            i += 1
    return tokens


class Module:
    def __init__(self, path, parent, name, file):
        self.path = path  # ("server", "http2", "stream")
        self.parent = parent
        self.name = name
        self.file = file
        self.children = {}
        self.items = set()
        self.bindings = {}  # name -> (segments, line)
        self.globs = []  # (segments, line)
        self.refs = []  # (segments, line, from_use)

    def display(self):
        return "::".join(self.path)


def parse_use_tree(toks, i, prefix, out):
    """Parses one use tree at toks[i]; appends (segments, alias, glob) to out; returns the
    index after it."""
    segs = list(prefix)
    while i < len(toks):
        t = toks[i].text
        if t == "{":
            i += 1
            while toks[i].text != "}":
                i = parse_use_tree(toks, i, segs, out)
                if toks[i].text == ",":
                    i += 1
            return i + 1
        if t == "*":
            out.append((segs, None, True))
            return i + 1
        if IDENT.fullmatch(t):
            segs = segs + [t]
            i += 1
            if i < len(toks) and toks[i].text == "::":
                i += 1
                continue
            alias = None
            if i < len(toks) and toks[i].text == "as":
                alias = toks[i + 1].text
                i += 2
            if segs[-1] == "self":
                segs = segs[:-1]
            out.append((segs, alias, False))
            return i
        i += 1
    return i


def module_file(directory, name):
    for candidate in (os.path.join(directory, name + ".rs"), os.path.join(directory, name, "mod.rs")):
        if os.path.exists(candidate):
            return candidate
    return None


def load_crate(name, src_dir, root_file):
    modules = []
    files = {}

    def load_file(module, file, child_dir):
        with open(file, encoding="utf-8") as f:
            text = f.read()
        files[file] = text
        toks = tokenize(text)
        scan(module, toks, child_dir)

    def scan(top, toks, child_dir):
        stack = [(top, child_dir, 0)]  # inline modules: (module, dir, brace depth at open)
        depth = 0
        i = 0
        while i < len(toks):
            module, mdir, _ = stack[-1]
            t = toks[i].text
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
                if len(stack) > 1 and depth == stack[-1][2]:
                    stack.pop()
            elif t == "mod" and i + 2 < len(toks) and IDENT.fullmatch(toks[i + 1].text):
                child_name = toks[i + 1].text
                child = Module(module.path + (child_name,), module, child_name, module.file)
                module.children[child_name] = child
                modules.append(child)
                if toks[i + 2].text == ";":
                    f = module_file(mdir, child_name)
                    if f is None:
                        raise SystemExit(f"{module.file}: mod {child_name}: file not found in {mdir}")
                    child.file = f
                    load_file(child, f, os.path.join(mdir, child_name))
                    i += 3
                    continue
                if toks[i + 2].text == "{":
                    stack.append((child, os.path.join(mdir, child_name), depth))
                    depth += 1
                    i += 3
                    continue
            elif t == "use":
                out = []
                j = parse_use_tree(toks, i + 1, [], out)
                for segs, alias, glob in out:
                    if glob:
                        module.globs.append((segs, toks[i].line))
                        module.refs.append((segs, toks[i].line, True))
                    elif segs:
                        module.bindings[alias or segs[-1]] = (segs, toks[i].line)
                        module.refs.append((segs, toks[i].line, True))
                while j < len(toks) and toks[j].text != ";":
                    j += 1
                i = j + 1
                continue
            elif t in KEYWORDS_DEFINING and i + 1 < len(toks) and IDENT.fullmatch(toks[i + 1].text):
                module.items.add(toks[i + 1].text)
            elif t == "macro_rules" and i + 2 < len(toks) and toks[i + 1].text == "!":
                module.items.add(toks[i + 2].text)
            elif IDENT.fullmatch(t) and i + 1 < len(toks) and toks[i + 1].text == "::" and (
                i == 0 or toks[i - 1].text != "::"
            ):
                segs = [t]
                j = i + 1
                while j + 1 < len(toks) and toks[j].text == "::" and IDENT.fullmatch(toks[j + 1].text):
                    segs.append(toks[j + 1].text)
                    j += 2
                module.refs.append((segs, toks[i].line, False))
                i = j
                continue
            i += 1

    root = Module((name,), None, name, root_file)
    modules.append(root)
    load_file(root, root_file, src_dir)
    return root, modules, files


class Resolver:
    def __init__(self, root):
        self.root = root
        self.busy = set()

    def lookup(self, module, name, depth=0):
        """What `name` means inside `module`: ("module", m), ("item", owner) or None."""
        if depth > 20:
            return None
        if name in module.children:
            return ("module", module.children[name])
        if name in module.bindings:
            key = (id(module), name)
            if key in self.busy:
                return None
            self.busy.add(key)
            try:
                return self.resolve(module, module.bindings[name][0], True, depth + 1)
            finally:
                self.busy.discard(key)
        if name in module.items:
            return ("item", module)
        for segs, _ in module.globs:
            key = (id(module), "*", tuple(segs))
            if key in self.busy:
                continue
            self.busy.add(key)
            try:
                g = self.resolve(module, segs, True, depth + 1)
            finally:
                self.busy.discard(key)
            if g and g[0] == "module":
                found = self.lookup(g[1], name, depth + 1)
                if found:
                    return found
        return None

    def resolve(self, module, segs, from_use, depth=0):
        """The module that owns what `segs` names, seen from `module`; None when outside
        the crate (std, a dependency) or unknown."""
        i = 0
        cur = module
        first = segs[0]
        if first == "crate":
            cur, i = self.root, 1
        elif first == "self":
            cur, i = module, 1
        elif first == "super":
            while i < len(segs) and segs[i] == "super":
                cur = cur.parent
                i += 1
                if cur is None:
                    return None
        else:
            found = self.lookup(module, first, depth)
            if found is None:
                return None
            if found[0] == "item":
                return found
            cur, i = found[1], 1
        while i < len(segs):
            found = self.lookup(cur, segs[i], depth)
            if found is None:
                return ("item", cur)
            if found[0] == "item":
                return found
            cur = found[1]
            i += 1
        return ("module", cur)


def owning_file_module(m):
    """Inline modules (`mod tests { ... }`) count as their own modules."""
    return m


def find_cycles(crate, root, modules):
    res = Resolver(root)
    edges = {}  # (a, b) -> first (file, line)
    for m in modules:
        for segs, line, from_use in m.refs:
            target = res.resolve(m, segs, from_use)
            if target is None:
                continue
            t = target[1]
            if t is m:
                continue
            # naming a child module itself (`use self::child;`) is not yet an import of it
            if target[0] == "module" and t.parent is m:
                continue
            edges.setdefault((m, t), (m.file, line))
    graph = {m: [] for m in modules}
    for (a, b) in edges:
        graph[a].append(b)
    # Tarjan's strongly connected components
    index, low, on, stack, sccs = {}, {}, set(), [], []
    counter = [0]

    def strong(v):
        work = [(v, iter(graph[v]))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(graph[w])))
                    advanced = True
                    break
                elif w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w is node:
                        break
                if len(comp) > 1:
                    sccs.append(comp)

    for m in modules:
        if m not in index:
            strong(m)
    problems = []
    for comp in sccs:
        members = set(comp)
        names = sorted(m.display() for m in comp)
        lines = [f"{crate}: module import cycle of {len(comp)} modules: {', '.join(names)}"]
        for (a, b), (file, line) in sorted(edges.items(), key=lambda e: (e[0][0].display(), e[0][1].display())):
            if a in members and b in members:
                lines.append(f"    {a.display()} -> {b.display()}  ({file}:{line})")
        problems.append("\n".join(lines))
    return problems


def long_functions(crate, files, root_dir):
    problems = []
    for file, text in files.items():
        toks = tokenize(text)
        rel = os.path.relpath(file, root_dir)
        i = 0
        while i < len(toks):
            is_test = i >= 4 and [t.text for t in toks[i - 4:i]] == ["#", "[", "test", "]"]
            if toks[i].text == "fn" and i + 1 < len(toks) and IDENT.fullmatch(toks[i + 1].text) and not is_test:
                name = toks[i + 1].text
                start = toks[i].line
                j = i + 2
                while j < len(toks) and toks[j].text not in ("{", ";"):
                    j += 1
                if j < len(toks) and toks[j].text == "{":
                    depth = 0
                    k = j
                    while k < len(toks):
                        if toks[k].text == "{":
                            depth += 1
                        elif toks[k].text == "}":
                            depth -= 1
                            if depth == 0:
                                break
                        k += 1
                    length = toks[min(k, len(toks) - 1)].line - start + 1
                    key = f"{rel}:{name}"
                    if length > MAX_FN_LINES and key not in LONG_FN_ALLOWED:
                        problems.append(f"{rel}:{start}: fn {name} is {length} lines (at most {MAX_FN_LINES})")
            i += 1
    return problems


def main():
    root_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    crates_dir = os.path.join(root_dir, "crates")
    problems = []
    for crate in sorted(os.listdir(crates_dir)):
        src = os.path.join(crates_dir, crate, "src")
        roots = [f for f in ("lib.rs", "main.rs") if os.path.exists(os.path.join(src, f))]
        for r in roots:
            root, modules, files = load_crate(crate, src, os.path.join(src, r))
            problems += find_cycles(crate, root, modules)
            if crate in FN_CHECK_CRATES and r == "lib.rs":
                problems += long_functions(crate, files, root_dir)
        for dirpath, _, names in os.walk(src):
            for n in names:
                if n.endswith(".rs"):
                    p = os.path.join(dirpath, n)
                    with open(p, encoding="utf-8") as f:
                        count = sum(1 for _ in f)
                    if count > MAX_FILE_LINES:
                        problems.append(f"{os.path.relpath(p, root_dir)}: {count} lines (at most {MAX_FILE_LINES})")
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} problem(s)")
        return 1
    print("layering: no module cycle, no file over 900 lines, no long function in server or edge")
    return 0


if __name__ == "__main__":
    sys.exit(main())
