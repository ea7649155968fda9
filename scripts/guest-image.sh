#!/usr/bin/env bash
# Builds a minimal QEMU test guest from Debian packages only:
#
#   OUTDIR/vmlinuz    the kernel of linux-image-cloud-amd64 (a Debian cloud
#                     kernel: virtio, PCI, serial console built in);
#   OUTDIR/initrd.gz  busybox-static, tests/guest/init as /init, the given
#                     guest binaries in /bin and every shared library they
#                     need (found with ldd).
#
# Usage: scripts/guest-image.sh OUTDIR [BINARY...]
#
# Packages come from the apt mirror this machine is configured with
# (`apt-get download` + `dpkg-deb -x`); nothing is installed on the host.
# Cached: the .debs are kept in OUTDIR/debs, and nothing is rebuilt when the
# kernel and busybox versions, this script, the init and the binaries are
# unchanged. No kernel modules are included: an ivshmem device's BARs are
# reached through sysfs (`resource0`, `resource2`) without a driver.
#
# Boot it with (see docs/deploy.md):
#   qemu-system-x86_64 -accel tcg -m 512 -nographic -no-reboot \
#     -kernel OUTDIR/vmlinuz -initrd OUTDIR/initrd.gz \
#     -append "console=ttyS0 quiet panic=-1" ...
set -euo pipefail

die() {
    printf 'guest-image: %s\n' "$*" >&2
    exit 1
}

[[ $# -ge 1 ]] || die "usage: $0 OUTDIR [BINARY...]"
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$1
shift
bins=("$@")
for b in "${bins[@]}"; do
    [[ -f $b && -x $b ]] || die "$b is not an executable file"
done
init="$root_dir/tests/guest/init"
[[ -f $init ]] || die "missing $init"

for tool in apt-get apt-cache dpkg-deb ldd gzip sha256sum; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (this script needs a Debian-like host)"
done

start=$(date +%s.%N)
mkdir -p "$out/debs"
out=$(cd "$out" && pwd)

sudo=()
apt_opts=()
if [[ $(id -u) -eq 0 ]]; then
    # Root downloads unsandboxed into our own directory (the _apt user
    # cannot write it); say so instead of letting apt warn.
    apt_opts=(-o APT::Sandbox::User=root)
elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
fi

# The candidate version of a package, updating the package lists once if
# apt knows none.
APT_UPDATED=0
candidate() {
    local v
    v=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { print $2 }')
    if [[ -z $v || $v == "(none)" ]] && [[ $APT_UPDATED -eq 0 ]]; then
        "${sudo[@]}" apt-get update >&2 || die "apt-get update failed"
        APT_UPDATED=1
        v=$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { print $2 }')
    fi
    [[ -n $v && $v != "(none)" ]] || die "no candidate for package $1"
    printf '%s\n' "$v"
}

# The concrete kernel package behind the cloud meta-package.
candidate linux-image-cloud-amd64 >/dev/null
kpkg=$(apt-cache depends linux-image-cloud-amd64 |
    awk '/Depends: linux-image-[0-9].*-cloud-amd64$/ { print $2; exit }')
[[ -n $kpkg ]] || die "cannot resolve linux-image-cloud-amd64 to a kernel package"
kver=$(candidate "$kpkg")
bbver=$(candidate busybox-static)

# Fetches PKG=VERSION into OUTDIR/debs unless it is there; prints the .deb.
fetch() {
    local pkg=$1 ver=$2 deb
    deb=$(find "$out/debs" -maxdepth 1 -name "${pkg}_*.deb" -print | head -n1)
    local want="$out/debs/${pkg}_${ver//:/%3a}_amd64.deb"
    if [[ ! -f $want ]]; then
        [[ -n $deb ]] && rm -f "$out/debs/${pkg}"_*.deb
        (cd "$out/debs" && apt-get "${apt_opts[@]}" download "$pkg=$ver" >&2) ||
            die "apt-get download $pkg=$ver failed"
    fi
    [[ -f $want ]] || die "download of $pkg=$ver did not produce $want"
    printf '%s\n' "$want"
}

# Everything the image depends on, to decide whether to rebuild.
inputs() {
    printf 'kernel %s %s\nbusybox %s\n' "$kpkg" "$kver" "$bbver"
    sha256sum "${BASH_SOURCE[0]}" "$init" | awk '{ print $1 }'
    for b in "${bins[@]}"; do
        printf '%s ' "$(basename "$b")"
        sha256sum "$b" | awk '{ print $1 }'
    done
}
stamp="$out/.inputs"
want_inputs=$(inputs)
if [[ -f $out/vmlinuz && -f $out/initrd.gz && -f $stamp ]] &&
    [[ $(cat "$stamp") == "$want_inputs" ]]; then
    echo "guest image in $out is up to date ($kpkg $kver, busybox $bbver)"
    exit 0
fi

kdeb=$(fetch "$kpkg" "$kver")
bbdeb=$(fetch busybox-static "$bbver")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Kernel: only the vmlinuz of the package.
mkdir "$work/kernel"
dpkg-deb --fsys-tarfile "$kdeb" | tar -x -C "$work/kernel" --wildcards './boot/vmlinuz-*'
vmlinuz=$(find "$work/kernel/boot" -name 'vmlinuz-*' -print | head -n1)
[[ -n $vmlinuz ]] || die "$kdeb holds no vmlinuz"

# The initramfs tree.
rootfs="$work/rootfs"
mkdir -p "$rootfs"/{bin,sbin,dev,proc,sys,tmp,run,root,etc,guest,usr/bin,usr/sbin}
mkdir "$work/busybox"
dpkg-deb -x "$bbdeb" "$work/busybox"
busybox="$work/busybox/bin/busybox"
[[ -x $busybox ]] || die "$bbdeb holds no bin/busybox"
cp "$busybox" "$rootfs/bin/busybox"
ln -s busybox "$rootfs/bin/sh"
cp "$init" "$rootfs/init"
chmod 755 "$rootfs/init"
echo 'root:x:0:0:root:/root:/bin/sh' >"$rootfs/etc/passwd"
echo 'root:x:0:' >"$rootfs/etc/group"

# Copies a file to the same path inside the rootfs, following symlinks.
copy_in() {
    local src=$1
    mkdir -p "$rootfs$(dirname "$src")"
    cp -L "$src" "$rootfs$src"
}

for b in "${bins[@]}"; do
    # Debug info is of no use in the guest and dominates a debug build.
    if command -v objcopy >/dev/null 2>&1; then
        objcopy --strip-debug "$b" "$rootfs/bin/$(basename "$b")"
    else
        cp -L "$b" "$rootfs/bin/$(basename "$b")"
    fi
    # `ldd` prints "name => /path (addr)" and "/path/ld-linux... (addr)".
    while read -r lib; do
        copy_in "$lib"
    done < <(ldd "$b" | awk '/=> \// { print $3 } /^[[:space:]]*\/[^ ]+ \(/ { print $1 }' | sort -u)
done

# newc archive with root-owned entries, built by the busybox we just
# unpacked (no cpio needed on the host).
(cd "$rootfs" && find . -mindepth 1 | LC_ALL=C sort |
    "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) | gzip -6 >"$work/initrd.gz"

cp "$vmlinuz" "$out/vmlinuz"
mv "$work/initrd.gz" "$out/initrd.gz"
printf '%s\n' "$want_inputs" >"$stamp"

end=$(date +%s.%N)
printf 'guest image in %s: %s %s, busybox %s; vmlinuz %s bytes, initrd.gz %s bytes; %.1f s\n' \
    "$out" "$kpkg" "$kver" "$bbver" "$(stat -c %s "$out/vmlinuz")" \
    "$(stat -c %s "$out/initrd.gz")" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')"
