# The tests of wc.sh, in plain POSIX sh: they run on the image's busybox, not the host's shell.
. ./wc.sh
failed=0
check() {
    if [ "$(count_words "$1")" = "$2" ]; then
        echo "ok: '$1' has $2 words"
    else
        echo "FAILED: '$1' should have $2 words, has $(count_words "$1")"
        failed=1
    fi
}
check "" 0
check "one" 1
check "two words" 2
check "  spaced   out  " 2
echo "running on: $(cat /etc/os-release)"
exit "$failed"
