// sd-bus from libsystemd, for the DBus target only (its one Swift type wraps every call).
#include <systemd/sd-bus.h>
