/* conn_flood: CHILDREN processes each open PER_CHILD connections to the
 * monitor's arbiter socket at once and say nothing; each then counts the
 * connections the monitor refused at once as too many (an answer with
 * status 0 and reason 5). Prints `refused=R opened=O`.
 *
 *   conn_flood SOCKET CHILDREN PER_CHILD */
#define _GNU_SOURCE
#include "common.h"
#include <fcntl.h>
#include <libgen.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

int main(int argc, char **argv) {
    test_init_output();
    if (argc != 4) {
        fprintf(stderr, "usage: conn_flood SOCKET CHILDREN PER_CHILD\n");
        return 64;
    }
    char dir_buf[4096], base_buf[256], path[128];
    snprintf(dir_buf, sizeof dir_buf, "%s", argv[1]);
    snprintf(base_buf, sizeof base_buf, "%s", argv[1]);
    int dir_fd = open(dirname(dir_buf), O_PATH | O_DIRECTORY);
    snprintf(path, sizeof path, "/proc/self/fd/%d/%s", dir_fd, basename(base_buf));
    int children = atoi(argv[2]), per_child = atoi(argv[3]);
    if (per_child > 200) return 64;
    int opened_pipe[2];
    if (pipe(opened_pipe) != 0) return 3;
    for (int c = 0; c < children; c++) {
        pid_t pid = fork();
        if (pid < 0) return 3;
        if (pid > 0) continue;
        int fds[200], opened = 0, refused = 0;
        for (int i = 0; i < per_child; i++) {
            fds[i] = socket(AF_UNIX, SOCK_STREAM, 0);
            struct sockaddr_un a = {.sun_family = AF_UNIX};
            strncpy(a.sun_path, path, sizeof(a.sun_path) - 1);
            if (connect(fds[i], (struct sockaddr *)&a, sizeof(a)) == 0) opened++;
        }
        usleep(300000);
        for (int i = 0; i < per_child; i++) {
            unsigned char answer[8];
            if (recv(fds[i], answer, sizeof answer, MSG_DONTWAIT) == 8 && answer[0] == 0 && answer[1] == 5) refused++;
        }
        char line[32];
        int n = snprintf(line, sizeof line, "%d %d\n", opened, refused);
        if (write(opened_pipe[1], line, n) != n) _exit(3);
        _exit(0);
    }
    close(opened_pipe[1]);
    FILE *in = fdopen(opened_pipe[0], "r");
    int opened = 0, refused = 0, o, r;
    while (fscanf(in, "%d %d", &o, &r) == 2) {
        opened += o;
        refused += r;
    }
    while (wait(NULL) > 0) {
    }
    printf("refused=%d\nopened=%d\n", refused, opened);
    return 0;
}
