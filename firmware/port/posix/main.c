/* posix port: the UART is a file descriptor (a pseudo-terminal, or one TCP connection), the
 * board's flash is a file mapped into memory with NOR erase/write semantics.
 *
 *   edgerun-fw --flash FILE (--uart PATH | --tcp PORT) [--trace]
 *
 * RESET re-initialises the core from flash (RAM state is lost, as on a board). Any flash access
 * outside the region aborts the process: the core must never issue one, and the fuzz tests run
 * this build under ASan/UBSan to prove it. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "device.h"
#include "edgerun/port.h"

static int uart_fd = -1, listen_fd = -1;
static uint8_t *flash;
static jmp_buf reset_jmp;

static void die(const char *what) {
    fprintf(stderr, "edgerun-fw: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void tcp_accept(void) {
    if (uart_fd >= 0) close(uart_fd);
    uart_fd = accept(listen_fd, NULL, NULL);
    if (uart_fd < 0) die("accept");
    int one = 1;
    setsockopt(uart_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(uart_fd, F_SETFL, O_NONBLOCK);
}

void port_init(void) {}

int port_uart_read(uint8_t *buf, int max) {
    ssize_t n = read(uart_fd, buf, (size_t)max);
    if (n > 0) return (int)n;
    if (n == 0 && listen_fd >= 0) tcp_accept(); /* the host hung up: wait for the next one */
    if (n < 0 && errno == EIO) usleep(20000);   /* pty master closed for now */
    return 0;
}

void port_uart_write(const uint8_t *buf, int n) {
    while (n > 0) {
        ssize_t k = write(uart_fd, buf, (size_t)n);
        if (k < 0) {
            if (errno == EAGAIN || errno == EINTR) {
                struct pollfd p = {uart_fd, POLLOUT, 0};
                poll(&p, 1, 100);
                continue;
            }
            return; /* the link is gone; the host will retry */
        }
        buf += k;
        n -= (int)k;
    }
}

void port_uart_wait(uint32_t ms) {
    struct pollfd p = {uart_fd, POLLIN, 0};
    poll(&p, 1, (int)ms);
}

/* The UART rates a pty takes (termios); over TCP there is no rate, but the same ones are accepted. */
static const struct {
    uint32_t baud;
    speed_t speed;
} rates[] = {{1200, B1200},     {2400, B2400},     {4800, B4800},     {9600, B9600},
             {19200, B19200},   {38400, B38400},   {57600, B57600},   {115200, B115200},
             {230400, B230400}, {460800, B460800}, {921600, B921600}, {1000000, B1000000}};

int port_uart_set_baud(uint32_t baud, int apply) {
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        if (rates[i].baud != baud) continue;
        struct termios t;
        if (apply && isatty(uart_fd) && tcgetattr(uart_fd, &t) == 0) {
            tcdrain(uart_fd);
            cfsetispeed(&t, rates[i].speed);
            cfsetospeed(&t, rates[i].speed);
            if (tcsetattr(uart_fd, TCSANOW, &t) != 0) return -1;
        }
        return 0;
    }
    return -1;
}

/* no GPIO here: the pulse goes to the log, where the tests count it */
void port_timestamp_pin(void) { fprintf(stderr, "edgerun-fw: timestamp pulse\n"); }

static uint64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}
uint32_t port_millis(void) { return (uint32_t)(now_us() / 1000u); }
uint32_t port_micros(void) { return (uint32_t)now_us(); }

uint32_t port_flash_size(void) { return ER_FLASH_TOTAL; }
const uint8_t *port_flash_map(void) { return flash; }

static void check_range(uint32_t off, uint32_t len, const char *op) {
    if (off > ER_FLASH_TOTAL || len > ER_FLASH_TOTAL - off) {
        fprintf(stderr, "edgerun-fw: flash %s outside the region: offset %u length %u\n", op, off, len);
        abort();
    }
}

int port_flash_erase(uint32_t off, uint32_t len) {
    check_range(off, len, "erase");
    if (off % ER_FLASH_SECTOR || len % ER_FLASH_SECTOR) abort();
    memset(flash + off, 0xFF, len);
    return 0;
}

int port_flash_write(uint32_t off, const uint8_t *data, uint32_t len) {
    check_range(off, len, "write");
    for (uint32_t i = 0; i < len; i++) flash[off + i] &= data[i]; /* NOR: bits only clear */
    return 0;
}

void port_reset(void) { longjmp(reset_jmp, 1); }

void port_exit(int code) {
    msync(flash, ER_FLASH_TOTAL, MS_SYNC);
    exit(code);
}

static void open_flash(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) die(path);
    struct stat st;
    if (fstat(fd, &st) != 0) die(path);
    if ((uint64_t)st.st_size != ER_FLASH_TOTAL) {
        if (ftruncate(fd, ER_FLASH_TOTAL) != 0) die(path);
        if (st.st_size == 0) { /* a new flash chip is erased */
            static uint8_t ff[ER_FLASH_SECTOR];
            memset(ff, 0xFF, sizeof ff);
            for (uint32_t o = 0; o < ER_FLASH_TOTAL; o += ER_FLASH_SECTOR)
                if (pwrite(fd, ff, sizeof ff, o) != (ssize_t)sizeof ff) die(path);
        }
    }
    flash = mmap(NULL, ER_FLASH_TOTAL, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (flash == MAP_FAILED) die("mmap");
    close(fd);
}

static void open_uart(const char *path) {
    uart_fd = open(path, O_RDWR | O_NOCTTY | O_NONBLOCK);
    if (uart_fd < 0) die(path);
    struct termios t;
    if (tcgetattr(uart_fd, &t) == 0) {
        cfmakeraw(&t);
        tcsetattr(uart_fd, TCSANOW, &t);
    }
}

static void open_tcp(int port) {
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (listen_fd < 0) die("socket");
    int one = 1;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listen_fd, (struct sockaddr *)&a, sizeof a) != 0) die("bind");
    if (listen(listen_fd, 1) != 0) die("listen");
    fprintf(stderr, "edgerun-fw: listening on 127.0.0.1:%d\n", port);
    tcp_accept();
}

int main(int argc, char **argv) {
    const char *flash_path = NULL, *uart = NULL;
    int tcp = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--flash") && i + 1 < argc) flash_path = argv[++i];
        else if (!strcmp(argv[i], "--uart") && i + 1 < argc) uart = argv[++i];
        else if (!strcmp(argv[i], "--tcp") && i + 1 < argc) tcp = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s --flash FILE (--uart PATH | --tcp PORT)\n", argv[0]);
            return 2;
        }
    }
    if (!flash_path || (!uart && !tcp)) {
        fprintf(stderr, "usage: %s --flash FILE (--uart PATH | --tcp PORT)\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    open_flash(flash_path);
    if (uart) open_uart(uart);
    else open_tcp(tcp);
    port_init();
    setjmp(reset_jmp);
    er_device_init(&er_dev);
    fprintf(stderr, "edgerun-fw: ready (active slot %d)\n", er_dev.slots.active == ER_SLOT_NONE ? -1 : er_dev.slots.active);
    er_device_run(&er_dev);
    return 0;
}
