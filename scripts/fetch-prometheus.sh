#!/usr/bin/env bash
# Prometheus's own binaries for the tests, as the judges of what Prometheus accepts: promtool (rule and
# configuration files; tests/unit/test_alert_rules.py) and prometheus (its command-line flags;
# tests/unit/plugins/plugin_utils/test_prometheus.py). Taken out of the distribution's prometheus package into DEST
# without installing that package, which would also start a Prometheus server on this machine.
# Usage: scripts/fetch-prometheus.sh [DEST]   (default .cache/prometheus; DEST/promtool, DEST/prometheus)
set -euo pipefail
dest=${1:-.cache/prometheus}
[ -x "$dest/promtool" ] && [ -x "$dest/prometheus" ] && exit 0
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    echo "gpufleet: the tests need Prometheus's promtool and prometheus; install Prometheus and link both into $dest" >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"  # apt's download sandbox user must be able to write there
download() { (cd "$work" && apt-get download -qq prometheus 2>&1); }
if ! download >/dev/null; then
    # No package lists yet (a fresh machine): read them once, then again.
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    download
fi
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
mkdir -p "$dest"
cp "$work/root/usr/bin/promtool" "$work/root/usr/bin/prometheus" "$dest/"
echo "gpufleet: $("$dest/promtool" --version 2>&1 | head -1) in $dest"
