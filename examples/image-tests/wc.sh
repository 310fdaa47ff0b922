# count_words TEXT: the number of words in TEXT.
count_words() {
    set -- $1
    echo $#
}
