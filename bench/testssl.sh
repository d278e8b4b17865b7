#!/usr/bin/env bash
# testssl.sh against tessera's default TLS settings (docs/tls.md): a test CA made here,
# a P-256 leaf for localhost signed by it, `tessera serve --tls-listen --cert --key`
# and nothing else, then testssl with that CA trusted and the checks
# -p (protocols) -s (cipher categories) -f (forward secrecy) -P (server preference)
# -S (certificate) -U (vulnerabilities). Prints testssl's findings; the summary is in
# docs/tls.md.
#
# usage: flock /tmp/bench.lock bench/testssl.sh [RSA]   (RSA: an RSA-2048 key instead)
set -euo pipefail
cd "$(dirname "$0")/.."
KIND=${1:-EC}

source bench/lib.sh
need testssl testssl.sh

cargo build --release --locked -q -p tessera
TESSERA=$PWD/target/release/tessera
make_work testssl

if [ "$KIND" = RSA ]; then
    keyopts=(-newkey rsa:2048)
else
    keyopts=(-newkey ec -pkeyopt ec_paramgen_curve:P-256)
fi
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
    -keyout "$work/ca.key" -out "$work/ca.pem" -subj "/CN=tessera test CA" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null
openssl req -new "${keyopts[@]}" -nodes -keyout "$work/key.pem" -out "$work/leaf.csr" \
    -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature%s\nextendedKeyUsage=serverAuth\n' \
    "$([ "$KIND" = RSA ] && echo ,keyEncipherment)" > "$work/leaf.ext"
openssl x509 -req -in "$work/leaf.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
    -CAcreateserial -days 30 -extfile "$work/leaf.ext" -out "$work/leaf.pem" 2>/dev/null
cat "$work/leaf.pem" "$work/ca.pem" > "$work/chain.pem"

mkdir -p "$work/site"
printf 'hello world\n' > "$work/site/index.html"
port=$(free_port)
"$TESSERA" serve --root "$work/site" --listen "127.0.0.1:$(free_port)" \
    --tls-listen "127.0.0.1:$port" --cert "$work/chain.pem" --key "$work/key.pem" \
    --workers 1 2>"$work/tessera.log" &
pids+=($!)
for _ in $(seq 100); do
    curl -fs --cacert "$work/ca.pem" -o /dev/null "https://localhost:$port/" && break
    sleep 0.1
done

echo "# $(date -u +%F) $(testssl --version 2>/dev/null | grep -o 'testssl *[0-9.]*' | head -1); tessera defaults, $KIND key, CA trusted with --add-ca"
testssl --quiet --color 0 --add-ca "$work/ca.pem" -p -s -f -P -S -U "https://localhost:$port/" 2>&1 | sed "s/\r//" || true
