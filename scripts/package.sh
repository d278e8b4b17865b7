#!/usr/bin/env bash
# Builds the Debian package with cargo-deb: the release binary, a man page per command
# (tessera generate man), bash/zsh/fish completions (tessera generate completions), the
# example configuration as /etc/tessera/tessera.toml, the demo site, the docs and the
# systemd unit packaging/tessera.service (installed, not enabled: edit the config, then
# `systemctl enable --now tessera`). Prints the package's path and contents.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-deb >/dev/null 2>&1; then
    echo "scripts/package.sh: installing cargo-deb" >&2
    cargo install cargo-deb --locked
fi

cargo build --release --locked -p tessera
bin=target/release/tessera
assets=target/assets
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
"$bin" generate man "$assets/man"
"$bin" generate completions bash > "$assets/completions/tessera.bash"
"$bin" generate completions zsh > "$assets/completions/_tessera"
"$bin" generate completions fish > "$assets/completions/tessera.fish"

# Stripped: the release profile keeps line tables (debug = 1) for backtraces and perf,
# which would triple the package. cargo-deb warns that the target/assets paths are not
# "target/release/": they are made above, not by cargo, which is what is meant.
deb=$(cargo deb -p tessera --no-build --locked --strip)
echo "$deb"
dpkg-deb -c "$deb"
