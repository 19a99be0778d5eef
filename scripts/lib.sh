# Shared by scripts/test, scripts/demo, scripts/gpu-check: install what is missing
# (Debian packages), configure and build. Rerunning skips what is already there.
# jemalloc is not among them: the configure fetches its source and compiles it
# into the library (cmake/zs_jemalloc.cmake), with zs_fetch_jemalloc_source below.
# python3 runs the demo's parity check and some tests; gnuplot draws the plots.
# libdnnl-dev (oneDNN): the example GPT's bf16 matrix products on the CPU's bf16
# instructions; the build works without it (they are then emulated).
# liburing-dev: io_uring for the NVMe tier's direct I/O (src/aio); without it
# the build works and a config asking for the tier is refused.
# libisal-dev (ISA-L): checkpoint CRC-32s 3.4x zlib's; without it, zlib's.
ZS_DEBS=(cmake make gcc g++ pkg-config openmpi-bin libopenmpi-dev libcjson-dev
         zlib1g-dev libopenblas-dev libopenblas-openmp-dev libdnnl-dev liburing-dev libisal-dev gnuplot-nox python3)

# zs_log_step LOG WHAT COMMAND...: one line on stderr ("WHAT"), the command's
# output appended to LOG; if it fails, the log's last lines follow on stderr
# and its status is returned.
zs_log_step() {
  local log=$1 what=$2 rc=0
  shift 2
  echo "$what (log: $log)" >&2
  echo "== $what: $*" >>"$log"
  "$@" >>"$log" 2>&1 </dev/null || rc=$?
  if ((rc)); then
    echo "failed ($rc): $what; the last lines of $log:" >&2
    tail -n 25 "$log" >&2
  fi
  return $rc
}

# zs_install_deps [LOG]: apt-get update and install of what ZS_DEBS lacks, one
# line a step; their output goes to LOG (ZS_INSTALL_LOG, else out/install.log).
zs_install_deps() {
  local log=${1:-${ZS_INSTALL_LOG:-out/install.log}} missing=()
  for p in "${ZS_DEBS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  mkdir -p "$(dirname "$log")" && : >"$log"
  local sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo)
  zs_log_step "$log" "apt-get update" "${sudo[@]}" apt-get update -q &&
    zs_log_step "$log" "apt-get install ${missing[*]}" "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# zs_install_python_deps: what scripts/test and CI add to python3. Best effort:
# safetensors and numpy, so that test_safetensors_python reads the export with
# Python's own safetensors (it skips without them). Unless ZS_TORCH=OFF: the
# libtorch adapter's tests (adapters/libtorch) run on libtorch's C++ API from
# PyPI's torch wheel, installed without its ~3 GB of CUDA dependencies: the
# adapter links torch_cpu + c10 only, which load with libcudart and libcupti (the
# CUDA toolkit's, else two small nvidia wheels).
zs_install_python_deps() {
  python3 -c "import safetensors, numpy" 2>/dev/null ||
    python3 -m pip install -q --disable-pip-version-check safetensors numpy >/dev/null 2>&1 ||
    echo "note: python3 safetensors/numpy not installed; test_safetensors_python will skip" >&2
  [ "${ZS_TORCH:-AUTO}" != OFF ] || return 0
  pyq() { python3 -c "import importlib.util as u, sys; s = u.find_spec('torch'); print(s.submodule_search_locations[0] if s else '')"; }
  [ -n "$(pyq)" ] || python3 -m pip install -q --disable-pip-version-check --no-deps "torch==${ZS_TORCH_VERSION:-2.15.0}" >&2
  if [ -n "$(pyq)" ] && ldd "$(pyq)/lib/libtorch_cpu.so" | grep -q "not found"; then
    python3 -m pip install -q --disable-pip-version-check --no-deps "nvidia-cuda-runtime==13.*" "nvidia-cuda-cupti==13.*" >&2
  fi
  # ZS_HF=ON: transformers, and the CUDA wheels Python's `import torch` loads (NCCL,
  # cuFile, cuSPARSELt, NVSHMEM: ~0.5 GB), for test_hf_export; it skips without them
  [ "${ZS_HF:-OFF}" = ON ] || return 0
  python3 -m pip install -q --disable-pip-version-check transformers >&2
  python3 -m pip install -q --disable-pip-version-check --no-deps "nvidia-nccl-cu13" "nvidia-cufile==1.*" \
    "nvidia-cusparselt-cu13" "nvidia-nvshmem-cu13" >&2
}

# zs_fetch_jemalloc_source: Debian's jemalloc source package (apt-get source: the
# .orig tarball, checked against the archive's signed index) into ./.debs/, which
# git ignores and scripts/gpu-deps carries. The configure runs it when .debs/ lacks
# the source (cmake/zs_jemalloc.cmake), and compiles it privately with
# general-dynamic TLS so that libzeroshard.so can be dlopened and leaves the host
# program's malloc alone. The machine's apt sources are read, not changed: their
# deb-src twins go into a private apt state that is removed afterwards. Needs no
# root.
zs_fetch_jemalloc_source() {
  ls .debs/jemalloc_*.orig.tar.* >/dev/null 2>&1 && return 0
  local tmp f rc=0
  tmp=$(mktemp -d)
  mkdir -p "$tmp/parts" "$tmp/lists/partial" "$tmp/cache/archives/partial" .debs
  touch "$tmp/none"
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -e "$f" ] && sed -E 's/^Types:.*/Types: deb-src/' "$f" >"$tmp/parts/$(basename "$f")"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -e "$f" ] && sed -nE 's/^deb[[:space:]]/deb-src /p' "$f" >"$tmp/parts/$(basename "$f").list"
  done
  local o=(-o Dir::Etc::SourceList="$tmp/none" -o Dir::Etc::SourceParts="$tmp/parts"
           -o Dir::State::Lists="$tmp/lists" -o Dir::Cache="$tmp/cache" -o APT::Sandbox::User=root)
  echo "fetching jemalloc's source package into .debs/" >&2
  # an index that has no sources (a third-party repository) must not stop the rest
  apt-get -qq "${o[@]}" update >&2 || true
  (cd .debs && apt-get -qq "${o[@]}" source --download-only jemalloc >&2) || rc=$?
  rm -rf "$tmp"
  ((rc == 0)) || echo "zs_fetch_jemalloc_source: apt-get source jemalloc failed" >&2
  return $rc
}

# zs_use_carried_debs PREFIX: unpacks .debs/*.deb (scripts/gpu-deps) under PREFIX
# with dpkg -x and points the build and the run at them: PATH, the Open MPI
# relocation (OPAL_PREFIX), pkg-config (only the carried .pc files, their paths
# under PREFIX through PKG_CONFIG_SYSROOT_DIR), libraries. For a machine that
# reaches no package archive.
zs_use_carried_debs() {
  local root=$1 p
  mkdir -p "$root"
  for f in .debs/*.deb; do dpkg -x "$f" "$root"; done
  p=$root/usr
  local lib=$p/lib/x86_64-linux-gnu
  # dpkg -x sets up no alternatives: name the programs ourselves
  for x in mpicc mpiexec mpirun; do ln -sf "$x.openmpi" "$p/bin/$x"; done
  # absolute links (libz.so -> /lib/.../libz.so.1.2.13) may name files this image
  # lacks: point them into the unpacked tree, else at the image's own soname
  local l t so
  for l in "$lib"/*.so; do
    [ -L "$l" ] && [ ! -e "$l" ] || continue
    t=$(readlink "$l")
    if [ -e "$root$t" ]; then
      ln -sf "$root$t" "$l"
    else
      so=$(basename "$l").1
      for c in /lib/x86_64-linux-gnu/$so /usr/lib/x86_64-linux-gnu/$so; do [ -e "$c" ] && ln -sf "$c" "$l" && break; done
    fi
  done
  [ -e "$p/bin/pkg-config" ] || ln -sf pkgconf "$p/bin/pkg-config"
  export PATH=$p/bin:$PATH OPAL_PREFIX=$p MPI_HOME=$lib/openmpi
  export LD_LIBRARY_PATH=$lib:$lib/openmpi/lib:$lib/openblas-pthread:${LD_LIBRARY_PATH:-}
  export LIBRARY_PATH=$lib:$lib/openblas-pthread:${LIBRARY_PATH:-}
  export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$lib/openblas-pthread/pkgconfig:$p/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$root
  export CMAKE_PREFIX_PATH=$p:${CMAKE_PREFIX_PATH:-}
  export CPATH=$p/include:$p/include/x86_64-linux-gnu/openblas-pthread:$lib/openmpi/include:${CPATH:-}
  export OMPI_MCA_plm_rsh_agent=false
}

# zs_build BUILD_DIR [cmake args...]
zs_build() {
  local dir=$1
  shift
  mkdir -p "$dir"
  cmake -S . -B "$dir" "$@" >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; return 1; }
  # the status is the build's: grep's own (nothing selected) is ignored
  local rc=0
  cmake --build "$dir" -j"$(nproc)" 2>&1 | { grep -Ev '^\[ *[0-9]+%\]' || true; } || rc=$?
  return $rc
}

# Open MPI as root, oversubscribed, without CMA (containers forbid ptrace).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_btl=self,vader
