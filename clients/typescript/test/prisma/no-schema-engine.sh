#!/bin/sh
# Stands in for Prisma's schema engine (a native binary the prisma CLI otherwise downloads from
# binaries.prisma.sh before any command, generate included). `prisma generate` never runs it: it
# parses the schema with @prisma/prisma-schema-wasm from npm. test.sh points
# PRISMA_SCHEMA_ENGINE_BINARY here, so nothing is fetched from outside the npm registry.
echo "no-schema-engine.sh: Prisma's schema engine is not installed (only prisma generate is supported here)" >&2
exit 1
