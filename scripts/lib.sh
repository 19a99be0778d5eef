# Shared by scripts/test, scripts/demo, scripts/gpu-check: install what is missing
# (Debian packages), configure and build. Rerunning skips what is already there.
ZS_DEBS=(cmake make gcc g++ pkg-config openmpi-bin libopenmpi-dev libjemalloc-dev libcjson-dev
         zlib1g-dev libopenblas-dev gnuplot-nox)

zs_install_deps() {
  local missing=()
  for p in "${ZS_DEBS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "installing: ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
}

# zs_build BUILD_DIR [cmake args...]
zs_build() {
  local dir=$1
  shift
  mkdir -p "$dir"
  cmake -S . -B "$dir" "$@" >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; return 1; }
  cmake --build "$dir" -j"$(nproc)" 2>&1 | grep -Ev '^\[ *[0-9]+%\]' || true
  test "${PIPESTATUS[0]}" = 0
}

# Open MPI as root, oversubscribed, without CMA (containers forbid ptrace).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_btl=self,vader
