/* Linked into the MPI test programs: fast_unwind_on_malloc=0 as AddressSanitizer's
 * default (ASAN_OPTIONS still overrides it). Open MPI and its plugins are built
 * without frame pointers, so the fast unwinder loses the frames that name
 * libmpi / libopen-pal / mca_* for the memory they keep until exit; LeakSanitizer
 * then reports it with "<unknown module>" frames that .ci/lsan.supp cannot
 * match. The slow unwinder keeps them. Unused in a build without sanitizers. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }
