#!/usr/bin/env bash
# Installs everything cats-sma needs to build, run and test, idempotently:
#   1. Debian/Ubuntu packages (apt-get), only when some are missing
#   2. a Rust toolchain (rustup) with rustfmt and clippy, Rust >= 1.85
#   3. the Python venv .venv with netconf-tests/requirements.txt
#   4. the IETF/IANA YANG modules from pyang's wheel, copied into yang/ietf/
#   5. the console browser test's npm packages (npm ci in tests/console; the browser
#      is Debian's chromium from step 1, never a download)
# Run as root, or as a user with sudo. Safe to run again: a second run only
# checks and changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO_ROOT=$PWD

MIN_RUST_MAJOR=1
MIN_RUST_MINOR=85

APT_PACKAGES=(
    build-essential cmake pkg-config libpcre2-dev
    python3 python3-venv python3-pip
    mosquitto mosquitto-clients
    gobgpd softflowd
    prometheus
    libyang2-tools yangcli
    openssh-client curl ca-certificates git
    chromium
)

VENV=$REPO_ROOT/.venv
REQUIREMENTS=$REPO_ROOT/netconf-tests/requirements.txt
VENV_STAMP=$VENV/.cats-sma-requirements.sha256
YANG_DEST=$REPO_ROOT/yang/ietf
CONSOLE_TEST=$REPO_ROOT/tests/console
CONSOLE_STAMP=$CONSOLE_TEST/node_modules/.cats-sma-package-lock.sha256
MIN_NODE_MAJOR=18

start_time=$(date +%s)
summary=()

log() { printf 'setup: %s\n' "$*"; }
die() {
    printf 'setup: ERROR: %s\n' "$*" >&2
    exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif have sudo; then
        sudo "$@"
    else
        die "need root to run '$*': run this script as root or install and configure sudo"
    fi
}

# Retries a command a few times (package mirrors have transient failures).
retry() {
    local attempt
    for attempt in 1 2 3; do
        if "$@"; then
            return 0
        fi
        log "attempt $attempt of '$*' failed"
        sleep $((attempt * 5))
    done
    return 1
}

# ---------------------------------------------------------------- 1. apt ---
install_system_packages() {
    local missing=() pkg status
    for pkg in "${APT_PACKAGES[@]}"; do
        status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
        if [ "$status" != "install ok installed" ]; then
            missing+=("$pkg")
        fi
    done
    if [ ${#missing[@]} -eq 0 ]; then
        summary+=("apt: all ${#APT_PACKAGES[@]} packages present")
        return
    fi
    have apt-get || die "missing packages (${missing[*]}) and no apt-get: only Debian/Ubuntu is supported"
    log "installing system packages: ${missing[*]}"
    # Always refresh the package lists first: installing from stale lists fails
    # with unmet dependencies on a fresh machine.
    retry as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q ||
        die "apt-get update failed"
    retry as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}" ||
        die "apt-get install failed for: ${missing[*]}"
    summary+=("apt: installed ${missing[*]}")
}

# --------------------------------------------------------------- 2. rust ---
rust_version_ok() {
    local version major minor
    have rustc || return 1
    version=$(rustc --version 2>/dev/null | awk '{print $2}') || return 1
    major=${version%%.*}
    minor=${version#*.}
    minor=${minor%%.*}
    [[ "$major" =~ ^[0-9]+$ && "$minor" =~ ^[0-9]+$ ]] || return 1
    [ "$major" -gt "$MIN_RUST_MAJOR" ] ||
        { [ "$major" -eq "$MIN_RUST_MAJOR" ] && [ "$minor" -ge "$MIN_RUST_MINOR" ]; }
}

install_rust() {
    local cargo_home=${CARGO_HOME:-$HOME/.cargo}
    # A rustup install from an earlier run may not be on PATH yet.
    if [ -x "$cargo_home/bin/cargo" ]; then
        case ":$PATH:" in
            *":$cargo_home/bin:"*) ;;
            *) PATH="$cargo_home/bin:$PATH" ;;
        esac
    fi

    if have cargo && rust_version_ok; then
        :
    elif have rustup; then
        log "Rust $(rustc --version 2>/dev/null || echo missing) is older than $MIN_RUST_MAJOR.$MIN_RUST_MINOR: updating the stable toolchain"
        rustup toolchain install stable --profile minimal -c rustfmt,clippy
        rustup default stable
        summary+=("rust: updated")
    else
        log "installing Rust with rustup (no cargo >= $MIN_RUST_MAJOR.$MIN_RUST_MINOR found)"
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
            RUSTUP_INIT_SKIP_PATH_CHECK=yes sh -s -- -y --profile minimal -c rustfmt,clippy ||
            die "rustup installation failed"
        # shellcheck source=/dev/null
        . "$cargo_home/env"
        PATH="$cargo_home/bin:$PATH"
        summary+=("rust: installed with rustup")
    fi

    rust_version_ok || die "Rust >= $MIN_RUST_MAJOR.$MIN_RUST_MINOR is required, found: $(rustc --version 2>&1 || true)"

    # rustfmt and clippy: add them through rustup when it is there (only when
    # missing, so a second run needs no network), otherwise just check.
    if have rustup; then
        local installed wanted=()
        installed=$(rustup component list --installed 2>/dev/null || true)
        grep -q '^rustfmt' <<<"$installed" || wanted+=(rustfmt)
        grep -q '^clippy' <<<"$installed" || wanted+=(clippy)
        if [ ${#wanted[@]} -gt 0 ]; then
            log "adding Rust components: ${wanted[*]}"
            rustup component add "${wanted[@]}" || die "rustup component add ${wanted[*]} failed"
        fi
    fi
    cargo fmt --version >/dev/null 2>&1 || die "rustfmt is missing (cargo fmt does not run)"
    cargo clippy --version >/dev/null 2>&1 || die "clippy is missing (cargo clippy does not run)"

    summary+=("$(rustc --version | awk '{print "rust " $2}')")
}

# ---------------------------------------------------------- 3. python venv ---
pick_python() {
    # Prefer the distro's python3 (installed above together with python3-venv).
    local candidate
    for candidate in /usr/bin/python3 "$(command -v python3 || true)"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ] &&
            "$candidate" -c 'import venv, ensurepip' >/dev/null 2>&1; then
            printf '%s\n' "$candidate"
            return 0
        fi
    done
    return 1
}

setup_venv() {
    [ -f "$REQUIREMENTS" ] || die "$REQUIREMENTS not found"
    local want have_stamp="" python
    want=$(sha256sum "$REQUIREMENTS" | awk '{print $1}')
    if [ -f "$VENV_STAMP" ]; then
        have_stamp=$(cat "$VENV_STAMP")
    fi
    if [ "$want" = "$have_stamp" ] && "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
        summary+=("venv up to date")
        return
    fi

    python=$(pick_python) || die "no python3 with the venv module found (is python3-venv installed?)"
    log "creating $VENV with $python ($("$python" --version 2>&1))"
    rm -rf "$VENV"
    "$python" -m venv "$VENV" || die "could not create the venv at $VENV"
    log "installing Python packages from ${REQUIREMENTS#"$REPO_ROOT"/}"
    retry "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQUIREMENTS" ||
        die "pip install -r $REQUIREMENTS failed"
    printf '%s\n' "$want" >"$VENV_STAMP"
    summary+=("venv (re)built")
}

# --------------------------------------------------------- 4. YANG modules ---
install_ietf_modules() {
    local share_dirs dir src found=0 copied=0 f name
    # pyang installs its modules as data files under <prefix>/share/yang/modules.
    share_dirs=$("$VENV/bin/python" - <<'EOF'
import sys, sysconfig
seen = []
for p in (sysconfig.get_path("data"), sys.prefix):
    if p and p not in seen:
        seen.append(p)
        print(p)
EOF
)
    mkdir -p "$YANG_DEST"
    for sub in ietf iana; do
        src=""
        while IFS= read -r dir; do
            if [ -d "$dir/share/yang/modules/$sub" ]; then
                src="$dir/share/yang/modules/$sub"
                break
            fi
        done <<<"$share_dirs"
        [ -n "$src" ] || die "pyang did not provide share/yang/modules/$sub in the venv (looked under: $(tr '\n' ' ' <<<"$share_dirs"))"
        for f in "$src"/*.yang; do
            [ -e "$f" ] || continue
            found=$((found + 1))
            name=$(basename "$f")
            if ! cmp -s "$f" "$YANG_DEST/$name"; then
                cp "$f" "$YANG_DEST/$name"
                copied=$((copied + 1))
            fi
        done
    done
    [ "$found" -gt 0 ] || die "pyang's wheel provided no IETF/IANA .yang modules"
    if [ "$copied" -gt 0 ]; then
        summary+=("yang/ietf: $copied of $found modules updated")
    else
        summary+=("yang/ietf: $found modules present")
    fi
}

# The TLS tests (tests/sci_ingress.rs) run mosquitto with a TLS listener and
# require_certificate: Debian's mosquitto is built with TLS (it links libssl3), so the
# package as shipped does; a build without TLS would fail those tests, say so here.
check_mosquitto_tls() {
    local bin
    bin=$(command -v mosquitto || true)
    [ -n "$bin" ] || bin=/usr/sbin/mosquitto
    if [ -x "$bin" ] && have ldd && ldd "$bin" 2>/dev/null | grep -q 'libssl'; then
        summary+=("mosquitto with TLS")
    else
        log "WARNING: $bin is not linked with OpenSSL: the MQTT-over-TLS tests cannot run"
    fi
}

# ------------------------------------------------ 5. console browser test ---
# tests/console.rs drives Debian's chromium with playwright-core (npm; the version pinned
# in package.json runs on Node.js >= 18, Debian 12's own). A machine with its own Node.js
# (and npm) keeps it; one without gets Debian's nodejs and npm.
install_console_test() {
    local want node_major
    if ! have node || ! have npm; then
        log "installing Debian's nodejs and npm (the console browser test)"
        retry as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm ||
            die "apt-get install nodejs npm failed"
        summary+=("apt: installed nodejs npm")
    fi
    node_major=$(node -p 'process.versions.node.split(".")[0]')
    [ "$node_major" -ge "$MIN_NODE_MAJOR" ] ||
        die "playwright-core needs Node.js >= $MIN_NODE_MAJOR, found $(node --version)"
    [ -x /usr/bin/chromium ] || die "/usr/bin/chromium is missing although the chromium package was asked for"
    want=$(sha256sum "$CONSOLE_TEST/package-lock.json" | awk '{print $1}')
    if [ -f "$CONSOLE_STAMP" ] && [ "$(cat "$CONSOLE_STAMP")" = "$want" ] &&
        [ -f "$CONSOLE_TEST/node_modules/playwright-core/package.json" ]; then
        summary+=("tests/console npm packages up to date")
        return
    fi
    log "installing the console test's npm packages (npm ci in ${CONSOLE_TEST#"$REPO_ROOT"/})"
    (cd "$CONSOLE_TEST" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 retry npm ci --no-audit --no-fund) ||
        die "npm ci in $CONSOLE_TEST failed"
    printf '%s\n' "$want" >"$CONSOLE_STAMP"
    summary+=("tests/console: npm ci")
}

install_system_packages
check_mosquitto_tls
install_rust
setup_venv
install_ietf_modules
install_console_test

elapsed=$(($(date +%s) - start_time))
joined=$(printf '%s; ' "${summary[@]}")
log "ok in ${elapsed}s: ${joined%; }"
