#!/bin/sh
# usage: run_sweep.sh FERRYRUN SM_SWEEP
# Nothing stays in /dev/shm after kill -9: the next ferry process removes
# a dead singleton's segment and heap, and leaves alone a live process's
# segment, a live job's (even its killed rank's) and files that are not
# ferry segments.
ferryrun=$1 prog=$2
dir=$(mktemp -d) || exit 1
livepid="" jobpid=""
cleanup() {
    # The live ones end by themselves once their input ends, and remove
    # their own files (ferryrun its job's).
    exec 3>&- 4>&-
    [ -n "$livepid" ] && wait "$livepid"
    [ -n "$jobpid" ] && wait "$jobpid"
    rm -f "/dev/shm/ferry-sweep-test-$$-0" "/dev/shm/ferry-sweep-test-$$-1-h1"
    rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "run_sweep: $*" >&2; exit 1; }

# Files that merely look like ours: a segment name with junk in it, and a
# heap name with no segment.
head -c 8192 /dev/urandom > "/dev/shm/ferry-sweep-test-$$-0"
head -c 8192 /dev/zero > "/dev/shm/ferry-sweep-test-$$-1-h1"

# A live singleton. Its input is a FIFO we hold open read-write (so that
# opening it never waits for a reader); closing it ends the input.
mkfifo "$dir/in"
exec 3<> "$dir/in"
"$prog" live < "$dir/in" > "$dir/live.out" 3>&- &
livepid=$!
for _ in $(seq 1 100); do
    grep -q '^segment' "$dir/live.out" 2>/dev/null && break
    sleep 0.1
done
live=$(sed -n 's/^segment //p' "$dir/live.out")
[ -n "$live" ] || { cat "$dir/live.out"; fail "the live process did not start"; }

# A live job whose rank 1 was killed: rank 0 waits for its input to end.
mkfifo "$dir/jobin"
exec 4<> "$dir/jobin"
"$ferryrun" --keep-going -n 2 --timeout 60 sh -c \
    'if [ "$FERRY_RANK" = 1 ]; then exec "$0" crash; else exec "$0" live < "$1"; fi' \
    "$prog" "$dir/jobin" > "$dir/job.out" 2>&1 3>&- 4>&- &
jobpid=$!
for _ in $(seq 1 100); do
    [ "$(grep -c '^segment' "$dir/job.out" 2>/dev/null)" -ge 2 ] && break
    sleep 0.1
done
jobdead=$(grep -A1 '^segment' "$dir/job.out" | sed -n 's/^segment //p' | grep -- '-1$' | head -n 1)
[ -n "$jobdead" ] || { cat "$dir/job.out"; fail "the job did not start"; }

# A singleton killed with its segment and a heap.
"$prog" crash > "$dir/crash.out" 2>&1 3>&- 4>&-
status=$?
[ "$status" -eq 77 ] && { cat "$dir/crash.out"; exit 77; }
seg=$(sed -n 's/^segment //p' "$dir/crash.out")
heap=$(sed -n 's/^heap //p' "$dir/crash.out")
[ -n "$seg" ] && [ -n "$heap" ] || { cat "$dir/crash.out"; fail "the crashing process said nothing"; }
[ -e "/dev/shm/$seg" ] && [ -e "/dev/shm/$heap" ] || fail "the crash left nothing to sweep"
echo "killed a singleton with $seg and $heap"

# The next ferry process sweeps.
FERRY_LOG_LEVEL=info "$prog" start > "$dir/start.out" 2>&1 3>&- 4>&- || { cat "$dir/start.out"; fail "start failed"; }
cat "$dir/start.out"
[ -e "/dev/shm/$seg" ] && fail "the dead singleton's segment $seg was left behind"
[ -e "/dev/shm/$heap" ] && fail "the dead singleton's heap $heap was left behind"
[ -e "/dev/shm/$live" ] || fail "the live process's segment $live was removed"
[ -e "/dev/shm/$jobdead" ] || fail "the live job's segment $jobdead (of its killed rank) was removed"
[ -e "/dev/shm/ferry-sweep-test-$$-0" ] || fail "a file that is not a ferry segment was removed"
[ -e "/dev/shm/ferry-sweep-test-$$-1-h1" ] || fail "a heap-like file with no segment was removed"
echo "swept the dead singleton's files; the live ones and the foreign ones are there"

# The live ones finish; they and the job's launcher remove their own.
exec 3>&- 4>&-
wait "$livepid"; livepid=""
wait "$jobpid"; jobpid=""
[ -e "/dev/shm/$live" ] && fail "$live outlived its process"
[ -e "/dev/shm/$jobdead" ] && fail "$jobdead outlived its job"
exit 0
