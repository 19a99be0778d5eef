/* The room in the NVMe tier's directory (zs__aio_dir_room, aio.h): needs no
 * liburing, so every build has it (setup checks a disk before any file). */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "aio/aio.h"

zs_status_t zs__aio_dir_room(const char *dir, uint64_t *free_bytes) {
  ZS_CHECK_HANDLE(dir, "zs__aio_dir_room");
  ZS_CHECK_HANDLE(free_bytes, "zs__aio_dir_room");
  *free_bytes = 0;
  struct stat sb;
  if (stat(dir, &sb) != 0)
    return ZS_FAIL(NULL, ZS_ERR_IO, "aio: directory '%s': %s: set nvme_path to an existing directory", dir,
                   strerror(errno));
  if (!S_ISDIR(sb.st_mode))
    return ZS_FAIL(NULL, ZS_ERR_IO, "aio: '%s' is not a directory: set nvme_path to a directory", dir);
  if (access(dir, W_OK | X_OK) != 0)
    return ZS_FAIL(NULL, ZS_ERR_IO, "aio: cannot create files in '%s': %s: choose a directory this process may write",
                   dir, strerror(errno));
  struct statvfs sv;
  if (statvfs(dir, &sv) != 0)
    return ZS_FAIL(NULL, ZS_ERR_IO, "aio: cannot read the free room of '%s': %s", dir, strerror(errno));
  *free_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
  return ZS_OK;
}
