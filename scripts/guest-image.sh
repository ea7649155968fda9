#!/usr/bin/env bash
# Builds a minimal QEMU test guest from Debian packages only:
#
#   OUTDIR/vmlinuz    the kernel of linux-image-cloud-amd64 (a Debian cloud
#                     kernel: virtio, PCI, serial console built in);
#   OUTDIR/initrd.gz  busybox-static, tests/guest/init as /init, the given
#                     guest binaries in /bin and every shared library they
#                     need (found with ldd), and the kernel's vfio modules
#                     with their dependencies and a modules.dep (so busybox
#                     `modprobe vfio-pci` works; the init loads them).
#
# Usage: scripts/guest-image.sh OUTDIR [BINARY...]
#
# Packages come from the apt mirror this machine is configured with
# (`apt-get download` + `dpkg-deb -x`); nothing is installed on the host.
# Cached: the .debs are kept in OUTDIR/debs, and nothing is rebuilt when the
# kernel and busybox versions, this script, the init and the binaries are
# unchanged.
#
# An ivshmem device's BARs are reached through sysfs (`resource0`,
# `resource2`) without a driver. Its MSI-X interrupts (the host → guest
# wake) reach a process only through vfio-pci, which needs a (virtual)
# IOMMU: boot with `-machine q35 -device intel-iommu,intremap=on` before the
# ivshmem device and `intel_iommu=on` on the kernel command line. In the
# cloud kernel, vfio, vfio_iommu_type1, vfio_virqfd, vfio-pci-core,
# vfio-pci and irqbypass are modules (CONFIG_*=m) and CONFIG_VFIO_NOIOMMU is
# not set, so vfio's no-IOMMU mode is unavailable.
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

# Kernel modules the guest loads (their dependencies come along): vfio-pci
# and the type1 IOMMU backend give a process the ivshmem device's MSI-X
# vectors as eventfds.
modules=(vfio-pci vfio_iommu_type1)

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
    printf 'kernel %s %s\nbusybox %s\nmodules %s\n' "$kpkg" "$kver" "$bbver" "${modules[*]}"
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

# Kernel modules: the wanted ones and, transitively, what their .modinfo
# says they depend on, at their paths under lib/modules/<release>.
krel=$(dpkg-deb --fsys-tarfile "$kdeb" | tar -t |
    awk -F/ '$2 == "lib" && $3 == "modules" && $5 == "kernel" && r == "" { r = $4 } END { print r }')
[[ -n $krel ]] || die "$kdeb holds no lib/modules/<release>/kernel tree"
mkdir "$work/mods"
dpkg-deb --fsys-tarfile "$kdeb" | tar -x -C "$work/mods" --wildcards \
    "./lib/modules/$krel/kernel/*.ko" "./lib/modules/$krel/modules.builtin" "./lib/modules/$krel/modules.order"
kmods="$work/mods/lib/modules/$krel"
# Every .ko by module name (`-` and `_` are the same in module names).
declare -A mod_path=()
while read -r f; do
    base=${f##*/}
    base=${base%.ko}
    mod_path[${base//-/_}]=$f
done < <(find "$kmods/kernel" -name '*.ko')
# A module's `depends=` field, as names separated by spaces.
module_deps() {
    grep -a -o 'depends=[^[:cntrl:]]*' "$1" | head -n1 | cut -d= -f2 | tr ',' ' '
}
declare -A have_mod=()
pending=("${modules[@]}")
while [[ ${#pending[@]} -gt 0 ]]; do
    m=${pending[0]//-/_}
    pending=("${pending[@]:1}")
    [[ -n ${have_mod[$m]:-} ]] && continue
    if grep -q -E "/${m//_/[-_]}\.ko\$" "$kmods/modules.builtin"; then
        have_mod[$m]=builtin
        continue
    fi
    f=${mod_path[$m]:-}
    [[ -n $f ]] || die "module $m is neither in $kdeb nor built in"
    have_mod[$m]=$f
    for d in $(module_deps "$f"); do pending+=("$d"); done
done

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

kroot="$rootfs/lib/modules/$krel"
mkdir -p "$kroot"
cp "$kmods/modules.builtin" "$kmods/modules.order" "$kroot/"
for m in "${!have_mod[@]}"; do
    f=${have_mod[$m]}
    [[ $f == builtin ]] && continue
    rel=${f#"$kmods/"}
    mkdir -p "$kroot/$(dirname "$rel")"
    cp "$f" "$kroot/$rel"
done
"$busybox" depmod -b "$rootfs" "$krel" || die "depmod failed for $krel"
[[ -s $kroot/modules.dep ]] || die "depmod wrote no modules.dep"

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
printf 'guest image in %s: %s %s, busybox %s, %s modules; vmlinuz %s bytes, initrd.gz %s bytes; %.1f s\n' \
    "$out" "$kpkg" "$kver" "$bbver" "$(find "$kroot" -name '*.ko' | wc -l)" "$(stat -c %s "$out/vmlinuz")" \
    "$(stat -c %s "$out/initrd.gz")" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')"
