/*
 * Leftovers: segments (and their heap objects) of processes that died
 * without finalizing, which nobody else removes when no launcher of ours
 * was there (a singleton, or a launcher that died too).
 *
 * Liveness is a lock, not a pid: a process holds an open-file-description
 * read lock (F_OFD_SETLK) on its segment for as long as it lives, and the
 * kernel drops it when the process dies, however it dies. A sweeper that
 * can take the write lock knows nobody holds the segment: immune to pid
 * reuse and to pid namespaces, and never fooled by a process that is alive
 * but stopped. What the sweeper removes must also prove to be ferry's: a
 * regular file of this user, of the size its header states, with this
 * version's magic and its own name inside. Anything else is left alone,
 * including the leftovers of other versions and of other users.
 *
 * A job's files go only when every segment of that job is unlocked, so a
 * live job keeps even its dead ranks' segments (its launcher removes them).
 *
 * The name is removed while the write lock is held, after checking that it
 * still names the locked file; whoever else removes a segment of another
 * process (a new process finding a dead one's file under its own name) does
 * the same, so nobody can remove a live process's file that replaced the
 * one it checked.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "btl/sm/sm.h"

#define SHM_DIR "/dev/shm"

static int ofd_lock(int fd, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    return fcntl(fd, F_OFD_SETLK, &fl);
}

/* Opens dir/name and reads its header if it is a ferry segment of this user
 * and version; -1 otherwise. */
static int open_segment(int dir, const char *name, sm_seg_hdr_t *h, struct stat *st)
{
    int fd = openat(dir, name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || st->st_uid != geteuid() ||
        (uint64_t)st->st_size < sizeof(*h) ||
        pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h) || h->magic != SM_MAGIC ||
        h->version != SM_VERSION || h->seg_size != (uint64_t)st->st_size ||
        memchr(h->name, '\0', sizeof(h->name)) == NULL || strcmp(h->name, name) != 0 ||
        h->job_len == 0 || h->job_len >= strlen(h->name)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Is nobody holding the segment? The write lock stays on fd if so. */
static bool unheld(int fd)
{
    return ofd_lock(fd, F_WRLCK) == 0;
}

/* Removes dir/name if it is the file fd has open (and locked). */
static bool unlink_same(int dir, const char *name, const struct stat *st)
{
    struct stat now;
    if (fstatat(dir, name, &now, AT_SYMLINK_NOFOLLOW) != 0 || now.st_dev != st->st_dev ||
        now.st_ino != st->st_ino)
        return false;
    return unlinkat(dir, name, 0) == 0;
}

/* Removes the heap objects of the segment called seg: seg-h<digits>, this
 * user's regular files. */
static int remove_heaps(int dir, const char *seg)
{
    size_t n = strlen(seg);
    int removed = 0;
    int dfd = dup(dir);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (d == NULL) {
        if (dfd >= 0)
            close(dfd);
        return 0;
    }
    /* The copy shares dir's position, which an earlier walk left at the end. */
    rewinddir(d);
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        const char *e = ent->d_name;
        if (strncmp(e, seg, n) != 0 || e[n] != '-' || e[n + 1] != 'h' || e[n + 2] == '\0' ||
            strspn(e + n + 2, "0123456789") != strlen(e + n + 2))
            continue;
        struct stat st;
        if (fstatat(dir, e, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            st.st_uid == geteuid() && unlinkat(dir, e, 0) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

/* Removes a segment nobody holds, with its heaps; the number of files
 * removed, or -1 when it is held (or not provably a segment of ours). */
static int remove_if_unheld(int dir, const char *name)
{
    sm_seg_hdr_t h;
    struct stat st;
    int fd = open_segment(dir, name, &h, &st);
    if (fd < 0)
        return -1;
    int removed = -1;
    if (unheld(fd) && unlink_same(dir, name, &st))
        removed = 1 + remove_heaps(dir, name);
    close(fd); /* drops the lock */
    return removed;
}

int sm_seg_create_file(const char *name, int *fd_out)
{
    for (int tries = 0; tries < 2; tries++) {
        int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0) {
            /* Held for our lifetime: the sweep's proof that we live. A kernel
             * without OFD locks leaves our files to the launcher. */
            ofd_lock(fd, F_RDLCK);
            *fd_out = fd;
            return FERRY_OK;
        }
        if (errno != EEXIST)
            return rt_status_from_errno(errno);
        /* A file of that name: a dead process's leftover (a crashed job
         * whose id came round again) is removed; a live one is kept. */
        int dir = open(SHM_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int removed = dir >= 0 ? remove_if_unheld(dir, name + 1) : -1;
        if (dir >= 0)
            close(dir);
        if (removed < 0)
            return FERRY_ERR_BUSY;
    }
    return FERRY_ERR_BUSY;
}

/* What the first pass learns of each segment. */
typedef struct seen {
    char name[SM_NAME_MAX];
    uint32_t job_len;
    bool held;
} seen_t;

static bool same_job(const seen_t *a, const seen_t *b)
{
    return a->job_len == b->job_len && strncmp(a->name, b->name, a->job_len) == 0 &&
           (b->name[b->job_len] == '-');
}

int sm_sweep(rt_log_t *log)
{
    int dir = open(SHM_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return 0;
    int dfd = dup(dir);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (d == NULL) {
        if (dfd >= 0)
            close(dfd);
        close(dir);
        return 0;
    }
    rewinddir(d);
    seen_t *seen = NULL;
    size_t n = 0, cap = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (strncmp(ent->d_name, "ferry-", 6) != 0)
            continue;
        sm_seg_hdr_t h;
        struct stat st;
        int fd = open_segment(dir, ent->d_name, &h, &st);
        if (fd < 0)
            continue;
        bool held = !unheld(fd);
        close(fd);
        if (n == cap) {
            size_t ncap = cap > 0 ? 2 * cap : 16;
            seen_t *s = realloc(seen, ncap * sizeof(*s));
            if (s == NULL)
                break;
            seen = s;
            cap = ncap;
        }
        snprintf(seen[n].name, sizeof(seen[n].name), "%s", h.name);
        seen[n].job_len = h.job_len;
        seen[n].held = held;
        n++;
    }
    closedir(d);

    int removed = 0;
    for (size_t i = 0; i < n; i++) {
        if (seen[i].held)
            continue;
        bool job_live = false;
        for (size_t j = 0; j < n && !job_live; j++)
            job_live = seen[j].held && same_job(&seen[i], &seen[j]);
        if (job_live)
            continue;
        /* Checked again, under the lock, as it is removed. */
        int got = remove_if_unheld(dir, seen[i].name);
        if (got > 0) {
            removed += got;
            rt_log(log, RT_LOG_INFO,
                   "sm: removed %s and %d heap object(s): left by a process that died without "
                   "finalizing",
                   seen[i].name, got - 1);
        }
    }
    free(seen);
    close(dir);
    return removed;
}
