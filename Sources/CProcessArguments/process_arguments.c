// The Swift runtime's CommandLine.arguments comes from _swift_stdlib_getUnsafeArgvArgc. On
// Linux the runtime's own definition (CommandLine.cpp) finds argv with a static constructor
// that runs in every process before main: it opens /proc/self/maps, scans every line with
// sscanf to find the stack, and walks back from environ. In the static `keychain` that was
// 49,000 of the 136,000 instructions of `keychain --version`, three system calls and the page
// faults of stdio and scanf (docs/performance.md, "The CLI's start").
//
// glibc calls each .preinit_array function of an executable with argc, argv and envp, before
// any constructor, so they are known for free. Defining the runtime's two entry points here,
// in an object the linker sees before libswiftCore.a, keeps CommandLine.cpp.o (and with it
// the constructor) out of the executable. Only for static executables: in a dynamic one the
// stdlib calls its own copy inside libswiftCore.so. Should a toolchain move other symbols into
// CommandLine.cpp.o, the link fails with a duplicate definition rather than running silently
// with two sources of argv.

#include <stddef.h>

static char **process_argv;
static int process_argc;
static char *empty_argv[] = { NULL };

static void keep_arguments(int argc, char **argv, char **envp) {
    (void)envp;
    process_argc = argc;
    process_argv = argv;
}

__attribute__((section(".preinit_array"), used))
static void (*const keep_arguments_entry)(int, char **, char **) = keep_arguments;

static char **override_argv;
static int override_argc;

// What the runtime's definition does with an override (set for JIT-run scripts).
__attribute__((swiftcall))
void _swift_stdlib_overrideUnsafeArgvArgc(char **argv, int argc) {
    override_argv = argv;
    override_argc = argc;
}

__attribute__((swiftcall))
char **_swift_stdlib_getUnsafeArgvArgc(int *outArgLen) {
    if (override_argv) {
        *outArgLen = override_argc;
        return override_argv;
    }
    if (!process_argv) {
        *outArgLen = 0;
        return empty_argv;
    }
    *outArgLen = process_argc;
    return process_argv;
}
