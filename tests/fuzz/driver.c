/*
 * The standalone driver of a fuzz harness, for builds without libFuzzer
 * (cmake/fuzz.cmake): runs every regular file of each folder given (and
 * each file given) through LLVMFuzzerTestOneInput once, in name order, and
 * prints how many. A harness that crashes, or trips a sanitizer in a
 * sanitized build, fails the test; so does finding no input at all, since
 * a corpus that went missing must not pass as a clean one. A folder that
 * does not exist (regress/ before the first regression) is skipped.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "fuzz driver: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    while (buf != NULL) {
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (len < cap) {
            break;
        }
        uint8_t *bigger = realloc(buf, cap * 2);
        if (bigger == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (buf == NULL || bad) {
        fprintf(stderr, "fuzz driver: cannot read %s\n", path);
        free(buf);
        return -1;
    }
    /* An exact-size copy, so that ASan sees a read past the input. */
    uint8_t *exact = malloc(len > 0 ? len : 1);
    if (exact == NULL) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, len);
    free(buf);
    fprintf(stderr, "fuzz driver: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs the files of a folder; returns how many, or -1 on an error. */
static long run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        if (errno == ENOENT) {
            return 0;
        }
        fprintf(stderr, "fuzz driver: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        if (n == cap) {
            cap = cap > 0 ? cap * 2 : 64;
            char **bigger = realloc(names, cap * sizeof(*names));
            if (bigger == NULL) {
                break;
            }
            names = bigger;
        }
        names[n] = strdup(e->d_name);
        if (names[n] != NULL) {
            n++;
        }
    }
    closedir(d);
    if (n > 1) {
        qsort(names, n, sizeof(*names), cmp_names);
    }
    long ran = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(path) != 0) {
                ran = -1;
                break;
            }
            ran++;
        }
    }
    for (size_t i = 0; i < n; i++) {
        free(names[i]);
    }
    free(names);
    return ran;
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize != NULL) {
        LLVMFuzzerInitialize(&argc, &argv);
    }
    long total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        long ran;
        if (stat(argv[i], &st) == 0 && S_ISREG(st.st_mode)) {
            ran = run_file(argv[i]) == 0 ? 1 : -1;
        } else {
            ran = run_dir(argv[i]);
        }
        if (ran < 0) {
            return 1;
        }
        total += ran;
    }
    if (total == 0) {
        fprintf(stderr, "fuzz driver: no input found in the folders given\n");
        return 1;
    }
    printf("fuzz driver: %ld inputs ran without a crash\n", total);
    return 0;
}
