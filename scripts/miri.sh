#!/usr/bin/env bash
# Runs under miri (nightly) the unit tests of the modules that have unsafe code, so that
# undefined behaviour in them (a use after free, a double drop, a read of uninitialised
# memory, a bad pointer handed to the kernel) fails a test. Not run by scripts/test.sh:
# miri interprets every instruction, and building the crates for it takes minutes; run it
# after changing unsafe code. Prints what it runs; exits non-zero on any failure.
# A recorded run: docs/security.md, "Unsafe code under miri".
#
# Covered, by module:
#   handler pooled.rs    the free-list allocator: reuse by size class, drop once, large
#                        and over-aligned values, trait objects (the `unsize` that
#                        body.rs and service.rs call is this one)
#   server net/tasks.rs  futures in place in their rooms, the static wakers, a panic
#                        dropping its task and freeing the room
#   server sys.rs        the system call wrappers on real loopback connections: accept4,
#                        epoll_create1/ctl/wait, recv, send, shutdown, pread
#   edge arena.rs        copies sharing a block; `Text`'s unchecked UTF-8
# Not covered, and why:
#   server net/reactor.rs  its epoll descriptor is registered in tokio's epoll (AsyncFd),
#                          and miri's epoll cannot watch an epoll descriptor ("epoll
#                          does not support this file description"); its tests are
#                          ignored under miri and run natively by cargo test. The calls
#                          it makes run under miri through sys.rs's tests.
#   server sys.rs          writev, sendmsg, sendfile: no miri shim (nightly 2026-05-19);
#                          getsockopt other than SO_ERROR, fcntl F_SETFD: not shimmed;
#                          openat2 (a raw syscall): not shimmed. Those tests are ignored
#                          under miri.
#   server http2, runtime.rs, net/listeners.rs  their unsafe (a Vec's length after a read,
#                          AsyncFd registration, adopting inherited listeners) is reached
#                          only through a live worker or the reactor: no unit test.
#   script                 its unsafe is LuaJIT's C API, which miri cannot execute.
set -euo pipefail
cd "$(dirname "$0")/.."

# The project's files install what it needs: miri is a rustup component of nightly.
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "scripts/miri.sh: installing the nightly toolchain's miri component" >&2
    rustup toolchain install nightly --profile minimal --component miri,rust-src
fi
cargo +nightly miri --version

failed=()
run() {
    local flags=$1
    shift
    echo
    echo "== MIRIFLAGS='$flags' cargo +nightly miri test $*"
    if ! MIRIFLAGS="$flags" cargo +nightly miri test "$@"; then
        failed+=("$*")
    fi
}

run "" -p handler --lib -- pooled::
# -Zmiri-ignore-leaks: Tasks::new leaks its ready list and per-slot wakers on purpose
# (a waker may outlive the worker); nothing else here is allowed to leak, and the other
# runs keep the leak check.
run "-Zmiri-ignore-leaks" -p server --lib -- net::tasks::
# -Zmiri-disable-isolation: the wrappers are tested on real loopback sockets and a file,
# which miri reaches only through the host. net::reactor's tests are listed to show them
# ignored (see above).
run "-Zmiri-disable-isolation" -p server --lib -- sys:: net::reactor::
run "" -p edge --lib -- arena::

echo
if [ ${#failed[@]} -ne 0 ]; then
    printf 'scripts/miri.sh: FAILED: %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "scripts/miri.sh: all passed"
