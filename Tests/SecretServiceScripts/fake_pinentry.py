#!/usr/bin/python3
# A pinentry stand-in speaking Assuan, for Tests/IntegrationTests/SecretServiceLockTests.swift.
# FAKE_PINENTRY_ANSWERS: comma-separated answers to successive GETPINs, each a passcode or
# "cancel". FAKE_PINENTRY_LOG: a file that gets every command line except the answers.
import os
import sys

answers = os.environ.get("FAKE_PINENTRY_ANSWERS", "cancel").split(",")
log = open(os.environ["FAKE_PINENTRY_LOG"], "a") if "FAKE_PINENTRY_LOG" in os.environ else None


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


say("OK Pleased to meet you")
for line in sys.stdin:
    line = line.rstrip("\n")
    if log:
        log.write(line + "\n")
        log.flush()
    if line == "GETPIN":
        answer = answers.pop(0) if answers else "cancel"
        if answer == "cancel":
            say("ERR 83886179 Operation cancelled <Pinentry>")
        else:
            say("D " + answer.replace("%", "%25"))
            say("OK")
    elif line == "BYE":
        say("OK closing connection")
        break
    else:
        say("OK")
