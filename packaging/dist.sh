#!/usr/bin/env bash
# make dist: static sitecon binaries for each architecture, their Debian
# packages (nfpm) and SHA256SUMS, in OUT (default dist/).
#   packaging/dist.sh [OUT]        ARCHES="amd64 arm64" by default
# VERSION and COMMIT default to what git says of the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
arches=${ARCHES:-amd64 arm64}
go=${GO:-go}
commit=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
# A tag v1.2.3 gives 1.2.3 (+N+g<hash> past it); a checkout without tags
# 0.0.0+g<hash>. A Debian version starts with a digit and here has no '-'
# (that would start a Debian revision).
if [ -z "${VERSION:-}" ]; then
	VERSION=$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null) ||
		VERSION="v0.0.0-g$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"
fi
version=$VERSION
deb_version=${version#v}
deb_version=${deb_version//-/+}

nfpm_version=$(awk '$1 == "require" && $2 == "github.com/goreleaser/nfpm/v2" {print $3}' packaging/tools/go.mod)
nfpm=${NFPM:-$HOME/.cache/sitecon/tools/nfpm-$nfpm_version}
if [ ! -x "$nfpm" ]; then
	echo "building nfpm $nfpm_version into $nfpm (once)"
	mkdir -p "$(dirname "$nfpm")"
	(cd packaging/tools && CGO_ENABLED=0 $go build -o "$nfpm.partial-$$" github.com/goreleaser/nfpm/v2/cmd/nfpm)
	mv "$nfpm.partial-$$" "$nfpm"
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
repo=$(pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# No -trimpath: the same compile flags as `make build`, so a dist after a
# build (or make test's install test) compiles nothing twice.
ldflags="-s -w -X github.com/sitecon/sitecon/cmd.buildVersion=$version -X github.com/sitecon/sitecon/cmd.buildCommit=$commit"
for arch in $arches; do
	# CGO off: one static binary that runs on any device's libc (or none).
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch $go build -ldflags "$ldflags" -o "$out/sitecon-linux-$arch" .
done
# Man pages and completions come from the command tree, through a binary
# this machine can run.
CGO_ENABLED=0 $go build -ldflags "$ldflags" -o "$stage/sitecon-host" .
"$stage/sitecon-host" gen-docs "$stage/docs"
gzip -9n "$stage"/docs/man1/*.1
for arch in $arches; do
	mkdir -p "$stage/$arch"
	cp "$out/sitecon-linux-$arch" "$stage/$arch/sitecon"
	ln -sfn "$stage/docs" "$stage/$arch/docs"
	ln -sfn "$repo/packaging" "$stage/$arch/packaging"
	(cd "$stage/$arch" && SITECON_ARCH=$arch SITECON_VERSION=$deb_version \
		"$nfpm" package --config packaging/nfpm.yaml --packager deb --target "$out/sitecon_${deb_version}_$arch.deb" >/dev/null)
done
(cd "$out" && rm -f SHA256SUMS && sha256sum sitecon-linux-* sitecon_*.deb > SHA256SUMS)
echo "$out:"; (cd "$out" && ls -l sitecon-linux-* sitecon_*.deb SHA256SUMS | awk '{print "  " $5 "\t" $9}')
