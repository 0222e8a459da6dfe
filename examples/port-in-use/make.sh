#!/bin/sh
# Regenerates this example from a real run (as root; SLURM examples need
# corpus/tools/slurm_setup.sh first).
set -e
cd "$(dirname "$0")/../.."
exec "${PYTHON:-python3}" corpus/tools/inject.py example-port-in-use
