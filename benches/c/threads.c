/* A process that starts THREADS threads (the first argument, 0 to 8) that
 * sleep in poll(2), as the shim's helper thread does, waits until each has
 * run, and exits. benches/startup.rs times it with 0, 1 and 2 threads:
 * what a sleeping thread costs a short process on the machine at hand. */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_barrier_t started;

static void *sleeper(void *unused) {
    (void)unused;
    pthread_barrier_wait(&started);
    poll(NULL, 0, 1000);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    if (threads < 0 || threads > 8) {
        fprintf(stderr, "threads: expected 0 to 8 threads, got %s\n", argv[1]);
        return 2;
    }
    if (threads == 0)
        return 0;
    pthread_attr_t attr;
    if (pthread_barrier_init(&started, NULL, (unsigned)threads + 1) || pthread_attr_init(&attr) ||
        pthread_attr_setstacksize(&attr, 256 * 1024) || pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED)) {
        fprintf(stderr, "threads: cannot set up the threads\n");
        return 1;
    }
    for (int i = 0; i < threads; i++) {
        pthread_t thread;
        if (pthread_create(&thread, &attr, sleeper, NULL)) {
            fprintf(stderr, "threads: cannot start thread %d\n", i + 1);
            return 1;
        }
    }
    /* Every thread has run up to its poll (or is about to enter it). */
    pthread_barrier_wait(&started);
    return 0;
}
