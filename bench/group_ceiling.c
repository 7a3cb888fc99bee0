/* The best a group commit of synchronous one-record callers can do on this machine.
 *
 * N threads each append one record at a time to one file and return only once
 * it is durable; whoever finds no flush running flushes everything written so
 * far for all of them (the classic group commit), the others sleep on a
 * condition variable until their record is covered ("group": one flush at a
 * time). With "overlap", a caller whose record no started flush covers starts
 * its own beside the running one, as many at once as the disk takes: a caller
 * checks right after its write, so no flush has begun since, and every record
 * gets a flush of its own (8 concurrent one-record fsyncs). With
 * "gather", the caller about to flush first waits (up to 200 us) until every
 * thread has a record written and not yet durable, so each flush carries as
 * many records as there are callers: the most batching synchronous callers
 * allow, paid for in latency. There is
 * no encoding, no
 * id check, no interpreter: what is left is the write, the flush, and the
 * threads' sleeps and wake-ups. bench/bench_log_reference.py builds and runs it
 * and sets tiermem's group commit against it.
 *
 *   cc -O2 -pthread -o group_ceiling group_ceiling.c
 *   ./group_ceiling FILE THREADS SECONDS SIZE fsync|fdatasync group|overlap|gather
 *
 * Prints one line of JSON: records, seconds, rate, p50/p99 latency (us), CPU
 * per record (us, user + system of the whole process), records per flush.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64
#define MAX_LAT (1 << 20) /* latencies kept per thread */

static int fd;
static int use_fdatasync;
static int overlap, gather, nthreads;
static size_t size;
static char *record;
static double seconds;
static atomic_int stop;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
static pthread_cond_t arrived; /* on the monotonic clock (main): the gather's 200 us is not a wall-clock step */
static unsigned long long written, durable, flushes, started;
static int flushing;

typedef struct {
    unsigned long long count;
    float *lat;
} worker_t;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fail(const char *what) {
    perror(what);
    exit(2);
}

static void *work(void *arg) {
    worker_t *w = arg;
    while (!stop) {
        double t0 = now();
        pthread_mutex_lock(&mu);
        if (write(fd, record, size) != (ssize_t)size) fail("write");
        unsigned long long mine = ++written;
        if (gather) pthread_cond_signal(&arrived);
        while (durable < mine) {
            /* A flush covers what was written before it began: wait when one running covers us
             * (both modes), or when any is running ("group"). */
            if (started >= mine || (!overlap && flushing)) {
                pthread_cond_wait(&done, &mu);
                continue;
            }
            flushing++;
            if (gather) {
                struct timespec until;
                clock_gettime(CLOCK_MONOTONIC, &until);
                until.tv_nsec += 200000;
                if (until.tv_nsec >= 1000000000L) {
                    until.tv_sec++;
                    until.tv_nsec -= 1000000000L;
                }
                while (written - durable < (unsigned long long)nthreads && !stop)
                    if (pthread_cond_timedwait(&arrived, &mu, &until) != 0) break;
            }
            unsigned long long upto = written;
            started = upto;
            pthread_mutex_unlock(&mu);
            if ((use_fdatasync ? fdatasync(fd) : fsync(fd)) != 0) fail("flush");
            pthread_mutex_lock(&mu);
            if (upto > durable) durable = upto; /* flushes may end out of order */
            flushing--;
            flushes++;
            pthread_cond_broadcast(&done);
        }
        pthread_mutex_unlock(&mu);
        if (w->count < MAX_LAT) w->lat[w->count] = (float)((now() - t0) * 1e6);
        w->count++;
    }
    return NULL;
}

static int by_value(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s FILE THREADS SECONDS SIZE fsync|fdatasync group|overlap|gather\n", argv[0]);
        return 2;
    }
    int threads = nthreads = atoi(argv[2]);
    seconds = atof(argv[3]);
    size = (size_t)atol(argv[4]);
    use_fdatasync = strcmp(argv[5], "fdatasync") == 0;
    overlap = strcmp(argv[6], "overlap") == 0;
    gather = strcmp(argv[6], "gather") == 0;
    if (threads < 1 || threads > MAX_THREADS || seconds <= 0 || size < 1 || size > (1 << 20)) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&arrived, &attr);
    fd = open(argv[1], O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644);
    if (fd < 0) fail("open");
    record = malloc(size);
    if (!record) fail("malloc");
    memset(record, 'x', size);
    record[size - 1] = '\n';

    worker_t ws[MAX_THREADS];
    pthread_t ts[MAX_THREADS];
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = now();
    for (int i = 0; i < threads; i++) {
        ws[i].count = 0;
        ws[i].lat = malloc(sizeof(float) * MAX_LAT);
        if (!ws[i].lat) fail("malloc");
        if (pthread_create(&ts[i], NULL, work, &ws[i]) != 0) fail("pthread_create");
    }
    struct timespec pause = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&pause, NULL);
    stop = 1;
    for (int i = 0; i < threads; i++) pthread_join(ts[i], NULL);
    double elapsed = now() - t0;
    getrusage(RUSAGE_SELF, &r1);

    unsigned long long total = 0, kept = 0;
    for (int i = 0; i < threads; i++) {
        total += ws[i].count;
        kept += ws[i].count < MAX_LAT ? ws[i].count : MAX_LAT;
    }
    float *all = malloc(sizeof(float) * (kept ? kept : 1));
    if (!all) fail("malloc");
    unsigned long long k = 0;
    for (int i = 0; i < threads; i++) {
        unsigned long long n = ws[i].count < MAX_LAT ? ws[i].count : MAX_LAT;
        memcpy(all + k, ws[i].lat, sizeof(float) * n);
        k += n;
    }
    qsort(all, kept, sizeof(float), by_value);
    double cpu = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) + (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) / 1e6 +
                 (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) + (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e6;
    printf("{\"threads\": %d, \"records\": %llu, \"seconds\": %.3f, \"rate\": %.1f, \"p50_us\": %.1f, "
           "\"p99_us\": %.1f, \"cpu_us_per_record\": %.2f, \"records_per_flush\": %.2f, \"flush\": \"%s\", "
           "\"mode\": \"%s\"}\n",
           threads, total, elapsed, total / elapsed, kept ? all[kept / 2] : 0.0,
           kept ? all[(unsigned long long)(kept * 0.99)] : 0.0, total ? cpu / total * 1e6 : 0.0,
           flushes ? (double)total / flushes : 0.0, use_fdatasync ? "fdatasync" : "fsync",
           argv[6]);
    close(fd);
    unlink(argv[1]);
    return 0;
}
