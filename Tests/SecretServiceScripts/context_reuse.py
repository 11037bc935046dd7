#!/usr/bin/python3
# Processes that did not make an authentication context try its reference
# (Tests/IntegrationTests/AuthenticationContextTests.swift). Prints "who status" lines, where a
# copyMatching of a class with no items answers -25300 when the context was accepted and -50
# when it was refused.
#   context_reuse.py SOCKET other HEX   this process, on its own connection, sends HEX
#   context_reuse.py SOCKET fork        this process makes a context and uses it ("parent"); a
#                                       forked child sends it on a connection of its own ("own"),
#                                       then, once the parent has exited, on the connection it
#                                       inherited from it ("inherited")
#   context_reuse.py SOCKET exec PYTHON this process makes a context, uses it ("before-exec"),
#                                       then execs PYTHON (a copy of python elsewhere: another
#                                       executable), which sends it on the same connection
#                                       ("after-exec")
import os
import socket
import struct
import sys
import time


def value(kind, payload):
    if kind == 4:
        return bytes([4]) + payload
    return bytes([kind]) + struct.pack("<I", len(payload)) + payload


def dictionary(entries):
    out = struct.pack("<I", len(entries))
    for key in sorted(entries):
        k = key.encode()
        out += struct.pack("<H", len(k)) + k + value(*entries[key])
    return out


def request(op, body):
    return struct.pack("<I", 2 + len(body)) + bytes([1, op]) + body


def read_frame(s):
    def exactly(n):
        data = b""
        while len(data) < n:
            more = s.recv(n - len(data))
            if not more:
                raise SystemExit("keychaind closed the connection")
            data += more
        return data
    (length,) = struct.unpack("<I", exactly(4))
    return exactly(length)


def status(frame):
    return struct.unpack("<i", frame[1:5])[0]


def read_with(s, reference):
    s.sendall(request(2, dictionary({"class": (1, b"genp"), "svce": (1, b"nothing-here"),
                                     "r_Data": (4, b"\x01"), "u_CredRef": (2, reference)})))
    return status(read_frame(s))


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def create_context(s):
    s.sendall(request(49, b""))
    frame = read_frame(s)
    assert status(frame) == 0, status(frame)
    (message_length,) = struct.unpack("<I", frame[5:9])
    rest = frame[9 + message_length:]
    assert rest[0] == 1 and rest[1] == 1, rest[:2]
    (length,) = struct.unpack("<I", rest[2:6])
    return rest[6:6 + length]


path, mode = sys.argv[1], sys.argv[2]
if mode == "other":
    say("other %d" % read_with(connect(path), bytes.fromhex(sys.argv[3])))
    sys.exit(0)
if mode == "after-exec":
    s = socket.socket(fileno=int(sys.argv[3]))
    say("after-exec %d" % read_with(s, bytes.fromhex(sys.argv[4])))
    sys.exit(0)

s = connect(path)
reference = create_context(s)
if mode == "exec":
    say("before-exec %d" % read_with(s, reference))
    os.set_inheritable(s.fileno(), True)
    python = sys.argv[3]
    os.execv(python, [python, os.path.abspath(__file__), path, "after-exec", str(s.fileno()), reference.hex()])
parent = os.getpid()
child = os.fork()
if child == 0:
    say("own %d" % read_with(connect(path), reference))
    while os.getppid() == parent:
        time.sleep(0.01)
    say("inherited %d" % read_with(s, reference))
    os._exit(0)
say("parent %d" % read_with(s, reference))
