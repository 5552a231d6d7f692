#!/usr/bin/env bash
# Builds the platform's runtime image without pulling any base image: a
# root file system from scratch holding glibc and libgcc from Debian's
# packages (as distroless/cc is made), /etc/passwd and /etc/group for the
# non-root user 65532, and every function binary of functions.toml and
# route-agent (the edge's DaemonSet) and kubebyon (the command line, for
# `kubectl run`/`podman run` and CI jobs that use the image) in
# /usr/local/bin. TLS roots are built into the binaries (webpki), so no CA
# package is needed. The image runs read-only as 65532:65532.
#
#   scripts/image.sh            the binaries the tests built (target/debug),
#                               debug info stripped: what CI runs
#   scripts/image.sh --release  cargo build --release of the production
#                               binaries (no simulator in `local`): what a
#                               registry gets
#   --tag NAME                  the image's name (default localhost/kubebyon:dev)
#
# It assembles a build context (target/image: the root file system and a
# Dockerfile `FROM scratch`), then builds it with buildah (daemonless,
# `--isolation chroot`) where it is installed, else with `docker build`.
# The context is the same either way. The image's ID and size are printed.
# Needs apt-get (a Debian 12 machine: the libraries match the glibc the
# binaries were linked against) and binutils' strip.
set -euo pipefail
cd "$(dirname "$0")/.."

release=
tag=localhost/kubebyon:dev
while [ $# -gt 0 ]; do
    case $1 in
        --release) release=1 ;;
        --tag) tag=$2; shift ;;
        *) echo "usage: scripts/image.sh [--release] [--tag NAME]" >&2; exit 2 ;;
    esac
    shift
done

binaries="$(python3 -c 'import tomllib; print(" ".join(tomllib.load(open("functions.toml", "rb"))))') route-agent kubebyon"
if [ -n "$release" ]; then
    cargo build --release --locked --workspace --bins \
        --exclude tests --exclude bench --exclude kube-sim --no-default-features
    from=target/release
else
    from=target/debug
fi

context=target/image
rm -rf "$context"
mkdir -p "$context/rootfs/usr/local/bin" "$context/debs" "$context/rootfs/etc" "$context/rootfs/tmp"
# apt fetches as its own user where it can write.
chmod 777 "$context/debs"
download() { (cd "$context/debs" && apt-get download -qq libc6 libgcc-s1 >/dev/null 2>&1); }
# A machine whose package lists were never fetched knows no package yet.
download || { [ "$(id -u)" = 0 ] && apt-get update -qq && download; } \
    || { echo "error: apt-get download libc6 libgcc-s1 failed (run apt-get update)" >&2; exit 1; }
for deb in "$context"/debs/*.deb; do
    dpkg-deb -x "$deb" "$context/rootfs"
done
# What no process of the image reads.
rm -rf "$context/rootfs/usr/share" "$context/rootfs/usr/lib/x86_64-linux-gnu/gconv" \
    "$context/rootfs/usr/lib/aarch64-linux-gnu/gconv"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
    >"$context/rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$context/rootfs/etc/group"
chmod 1777 "$context/rootfs/tmp"
for binary in $binaries; do
    [ -x "$from/$binary" ] || { echo "error: $from/$binary is not built" >&2; exit 1; }
    cp "$from/$binary" "$context/rootfs/usr/local/bin/"
    [ -n "$release" ] || strip --strip-debug "$context/rootfs/usr/local/bin/$binary"
done
cat >"$context/Dockerfile" <<'EOF'
FROM scratch
COPY rootfs/ /
USER 65532:65532
EOF

if command -v buildah >/dev/null; then
    # The previous build's image goes, so repeated builds do not fill the disk.
    buildah rmi "$tag" >/dev/null 2>&1 || true
    buildah bud --quiet --isolation chroot --layers=false -t "$tag" -f "$context/Dockerfile" "$context" >/dev/null
    buildah rmi --prune >/dev/null 2>&1 || true
    inspect() { buildah inspect --type image --format "$1" "$tag"; }
    id=$(inspect '{{.FromImageID}}')
    size=$(du -sb "$context/rootfs" | cut -f1)
else
    docker build -q -t "$tag" -f "$context/Dockerfile" "$context" >/dev/null
    id=$(docker image inspect --format '{{.Id}}' "$tag")
    size=$(docker image inspect --format '{{.Size}}' "$tag")
fi
echo "$tag: image ${id}, $((size / 1024 / 1024)) MiB, user 65532:65532, binaries from $from"
