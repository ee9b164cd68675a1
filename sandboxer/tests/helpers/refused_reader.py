# A confined chat that keeps trying to get at refused paths while the product rewrites them
# (tests/linux_refused_replace.rs). Argument: a JSON object with
#   file, folder    the refused file and folder
#   staging         the staging folder beside them
#   control         a granted file the chat must keep reading (the loop is really running)
#   ready, stop     it creates `ready` once looping, and stops once `stop` exists
#   stat            whether a non-zero size seen by stat counts as a leak (not in the
#                   landlock-only shape: stat is no Landlock right, a gap the planner names)
# Prints one JSON object: iterations, the control reads, and every leak / forbidden change seen.
import json
import os
import stat
import sys
import time

a = json.loads(sys.argv[1])
leaks, changes = [], []
iterations = control_ok = 0


def note(kind, what):
    if len(leaks) + len(changes) < 50:
        (leaks if kind == "leak" else changes).append(what)


def try_read(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
        if data:
            note("leak", f"read {path}: {data[:80]!r}")
    except OSError:
        pass
    try:
        st = os.stat(path)
        if a["stat"] and stat.S_ISREG(st.st_mode) and st.st_size > 0:
            note("leak", f"stat {path}: size {st.st_size}")
    except OSError:
        pass


def try_list(path):
    try:
        names = os.listdir(path)
        if names:
            note("leak", f"listdir {path}: {names[:5]}")
        for n in names:
            try_read(os.path.join(path, n))
    except OSError:
        pass


def try_change(what, fn):
    try:
        fn()
        note("change", what)
    except OSError:
        pass


with open(a["ready"], "w") as f:
    f.write("ready\n")
deadline = time.time() + 120
while not os.path.exists(a["stop"]) and time.time() < deadline:
    iterations += 1
    try:
        with open(a["control"], "rb") as f:
            if f.read():
                control_ok += 1
    except OSError:
        pass
    try_read(a["file"])
    try_list(a["folder"])
    try_read(os.path.join(a["folder"], "plan.md"))
    try_list(a["staging"])
    if iterations % 10 == 0:
        try_change("created the file", lambda: os.close(os.open(a["file"], os.O_WRONLY | os.O_CREAT)))
        try_change("removed the file", lambda: os.unlink(a["file"]))
        try_change("removed the folder", lambda: os.rmdir(a["folder"]))
        try_change("renamed the file away", lambda: os.rename(a["file"], a["file"] + ".moved"))
        try_change("created in the folder", lambda: os.close(os.open(os.path.join(a["folder"], "x"), os.O_WRONLY | os.O_CREAT)))
        try_change("created in staging", lambda: os.close(os.open(os.path.join(a["staging"], "x"), os.O_WRONLY | os.O_CREAT)))
print(json.dumps({"iterations": iterations, "control_ok": control_ok, "leaks": leaks, "changes": changes}))
