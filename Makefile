# The two commands of README.md: `make run` and `make test`. Both install what they need.
SWIFT ?= swift

.PHONY: deps build run test fuzz bench clean

deps:
	@scripts/install-deps

build: deps
	$(SWIFT) build

# Runs keychaind in the foreground on its embedded defaults.
run: deps
	$(SWIFT) run keychaind

# The whole suite: the Swift tests, then the Python client's against the real daemon (in a
# virtual environment .venv that scripts/test-python makes), then a package that depends on
# keychaind by version and uses KeychainClient (scripts/check-consumer), then a short smoke of
# each fuzz target (scripts/fuzz --smoke). KEYCHAIND_INSECURE_FAST_KDF=1
# lowers Argon2id to libsodium's minimum for speed; never set it for a real daemon.
# scripts/fetch-toml-test fetches toml-test's cases (once) for the TOML decoder's tests.
test: deps
	scripts/fetch-toml-test
	KEYCHAIND_INSECURE_FAST_KDF=1 $(SWIFT) test
	scripts/test-python
	scripts/check-consumer
	scripts/fuzz --smoke

# Each libFuzzer target of Tests/Fuzz for FUZZ_SECONDS (default 60); docs/security.md, "Fuzzing".
FUZZ_SECONDS ?= 60
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz

bench: deps
	$(SWIFT) run -c release keychain-bench

clean:
	rm -rf .build
