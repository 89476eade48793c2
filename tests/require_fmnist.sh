# Sourced by the tests that train on Fashion-MNIST: sets `data` and returns
# when the data set is there; else fails under CI (which installs it) or
# skips (exit 77). $1: the test's name, for the message.
data=/usr/share/datasets/fashion-mnist
if [ ! -r "$data/train-images-idx3-ubyte.gz" ]; then
    if [ "${CI:-}" = "true" ]; then
        echo "FAILED: $data is missing; CI installs dataset-fashion-mnist" >&2
        exit 1
    fi
    echo "SKIPPED: $1: $data is missing (apt-get install dataset-fashion-mnist)"
    exit 77
fi
