# Sourced by every script: the Go toolchain the module needs. The machines'
# own Go is older and runs with GOTOOLCHAIN=local, which ignores go.mod's go
# line, so the version is named here (read from go.mod, the one place it is
# kept) and the go command fetches it through the module proxy once.
# An explicit GOTOOLCHAIN in the environment wins.
if [ -z "${GOTOOLCHAIN:-}" ] || [ "$GOTOOLCHAIN" = local ]; then
  GOTOOLCHAIN=go$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../go.mod")
  export GOTOOLCHAIN
fi
