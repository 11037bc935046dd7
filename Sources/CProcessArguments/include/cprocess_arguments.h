#ifndef CPROCESS_ARGUMENTS_H
#define CPROCESS_ARGUMENTS_H

// Nothing to call: linking this target into a static executable gives the Swift runtime its
// argc and argv from glibc's start-up (process_arguments.c says why).

#endif
