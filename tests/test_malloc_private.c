/* A program that links libzeroshard keeps the C library's malloc. zeroshard's
 * jemalloc lives inside the library under the zs_je_ prefix with hidden names
 * (cmake/zs_jemalloc.cmake); the allocator of the host program and of its other
 * libraries (libtorch, MPI, Python) must stay glibc's, or whatever it chose.
 *
 * Built twice by tests/malloc.cmake, against the shared library and against the
 * static one, the way a user's program links either (find_package(zeroshard)).
 * A build that linked Debian's libjemalloc.so.2 (the old fallback when the source
 * was missing) failed here: the static link put libjemalloc.so.2 before libc in
 * the program's search order, so malloc, free, ... all resolved to jemalloc. */
#include <dlfcn.h>
#include <gnu/lib-names.h> // defines: LIBC_SO
#include <malloc.h>        // defines: malloc_usable_size

#include "harness.h"
#include "zeroshard/zeroshard.h"

static const char *const alloc_names[] = {"malloc",        "free",    "calloc", "realloc",
                                          "posix_memalign", "aligned_alloc", "memalign",
                                          "valloc",         "malloc_usable_size"};

static const char *object_of(void *sym) {
  Dl_info info;
  return sym && dladdr(sym, &info) && info.dli_fname ? info.dli_fname : "(nowhere)";
}

/* Every allocation entry point this process calls is the C library's. */
static void test_malloc_is_libc(void) {
#ifdef ZS_SANITIZED
  zs_test_skip("sanitizer build: the sanitizer runtime replaces malloc on purpose");
#endif
  void *libc = dlopen(LIBC_SO, RTLD_NOW | RTLD_NOLOAD);
  assert_true(libc != NULL);
  for (size_t i = 0; i < sizeof alloc_names / sizeof alloc_names[0]; i++) {
    const char *n = alloc_names[i];
    void *used = dlsym(RTLD_DEFAULT, n), *own = dlsym(libc, n);
    if (used != own)
      ZS_T_REPORT("%s resolves to %s, not %s: a library this program loads replaced the C library's allocator",
                  n, object_of(used), object_of(own));
  }
  dlclose(libc);
}

/* The library's own jemalloc (pinned arena, big-buffer arena) and glibc's malloc
 * work side by side, and a block from one is not mistaken for the other's. */
static void test_both_allocate(void) {
  zs_device_t *dev;
  assert_ok(zs_device_create_cpu(&dev));
  void *pinned = NULL, *big = NULL;
  expect_ok(zs_device_host_alloc(dev, 3u << 20, ZS_MEM_OPTIMIZER, ZS_HOST_PINNED | ZS_HOST_STRICT, &pinned));
  expect_ok(zs_device_alloc(dev, 1u << 20, ZS_MEM_PARAMS, &big));
  char *mine = malloc(100);
  expect_true(mine != NULL);
  if (mine) {
    memset(mine, 7, 100);
    expect_true(malloc_usable_size(mine) >= 100);
  }
  free(mine);
  if (pinned) memset(pinned, 1, 3u << 20);
  if (big) memset(big, 2, 1u << 20);
  zs_device_host_free(dev, pinned, 3u << 20, ZS_MEM_OPTIMIZER);
  zs_device_free(dev, big, 1u << 20, ZS_MEM_PARAMS);
  zs_device_destroy(dev);
}

int main(void) {
  zs_test_run(test_malloc_is_libc);
  zs_test_run(test_both_allocate);
  return zs_test_finish();
}
