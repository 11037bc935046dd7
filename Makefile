# The two commands of README.md: `make run` and `make test`. Both install what they need.
SWIFT ?= swift

.PHONY: deps build run test fuzz bench clean man install install-files uninstall deb check-package pkcs11 pam

# Where `make install` puts things; DESTDIR stages them (packaging). Units go to
# PREFIX/lib/systemd (systemd reads /usr/local/lib/systemd too); the config goes to
# /etc/keychaind whatever the prefix, because that is where keychaind and its unit look.
PREFIX ?= /usr/local
DESTDIR ?=
CONFIGURATION ?= release
BINDIR = $(PREFIX)/bin
MANDIR = $(PREFIX)/share/man
DOCDIR = $(PREFIX)/share/doc/keychaind
UNITDIR = $(PREFIX)/lib/systemd/system
USERUNITDIR = $(PREFIX)/lib/systemd/user
SYSCONFDIR ?= /etc
BASHCOMPDIR = $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR = $(PREFIX)/share/zsh/vendor-completions
FISHCOMPDIR = $(PREFIX)/share/fish/vendor_completions.d
# The Secret Service bridge's D-Bus activation and portal files: kept out of the directories
# D-Bus and xdg-desktop-portal search, because gnome-keyring owns the same names there;
# `keychain-secret-service --enable` copies them into the user's own directories.
SHAREDIR = $(PREFIX)/share/keychaind
# The PKCS#11 module, and its p11-kit registration (a .module file naming it by absolute path):
# p11-kit reads /etc/pkcs11/modules whatever the prefix; the .deb uses /usr/share/p11-kit/modules.
PKCS11DIR = $(PREFIX)/lib/pkcs11
P11KITMODULEDIR ?= $(SYSCONFDIR)/pkcs11/modules
PRODUCTS = keychaind keychain git-credential-keychain keychain-secret-service
# The PAM module goes where libpam looks for modules by name, and its pam-auth-update profile
# where pam-auth-update reads them, whatever the prefix (as the config goes to /etc).
MULTIARCH := $(shell dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
PAMDIR ?= /usr/lib/$(MULTIARCH)/security
PAMCONFIGDIR ?= /usr/share/pam-configs
# polkitd reads actions from here alone, whatever the prefix.
POLKITACTIONDIR ?= /usr/share/polkit-1/actions
PAM_MODULE = .build/pam/pam_keychaind.so
# The Swift runtime is linked in, so the executables run where no Swift toolchain is.
SWIFT_BUILD_FLAGS = -c $(CONFIGURATION) --static-swift-stdlib
BUILT = .build/$(CONFIGURATION)
GENERATED = .build/generated
MANPAGES = $(patsubst man/%.scd,$(GENERATED)/man/%,$(wildcard man/*.scd))

deps:
	@scripts/install-deps

# The PKCS#11 module (docs/pkcs11.md): C against p11-kit's pkcs11.h, no language runtime, since
# p11-kit loads it into every consumer.
CC ?= cc
PKCS11_MODULE = .build/pkcs11/libkeychaind-pkcs11.so
PKCS11_CFLAGS = -std=c11 -O2 -g -Wall -Wextra -Wno-unused-parameter -fPIC -fvisibility=hidden \
	-D_FORTIFY_SOURCE=2 -fstack-protector-strong $(shell pkg-config --cflags p11-kit-1)
pkcs11: $(PKCS11_MODULE)
$(PKCS11_MODULE): $(wildcard pkcs11/*.c pkcs11/*.h pkcs11/*.inc)
	@mkdir -p $(dir $@)
	$(CC) $(PKCS11_CFLAGS) -shared -Wl,-z,relro,-z,now -Wl,--no-undefined -o $@ pkcs11/module.c pkcs11/wire.c -lpthread
# Signatures through the module and through SoftHSM2 (scripts/pkcs11-bench).
.build/pkcs11/keychain-pkcs11-bench: pkcs11/bench.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -Wall -Wextra $(shell pkg-config --cflags p11-kit-1) -o $@ pkcs11/bench.c -ldl -lpthread

build: deps pam
	$(SWIFT) build

# pam_keychaind.so: plain C against libpam (docs/security.md, "The PAM module").
pam: $(PAM_MODULE)
$(PAM_MODULE): pam/pam_keychaind.c
	mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -fPIC -fstack-protector-strong -D_FORTIFY_SOURCE=2 \
		-shared -Wl,-z,relro,-z,now -o $@ $< -lpam

# Runs keychaind in the foreground on its embedded defaults.
run: deps
	$(SWIFT) run keychaind

# The whole suite: the Swift tests, then the Python client's against the real daemon (in a
# virtual environment .venv that scripts/test-python makes), then a package that depends on
# keychaind by version and uses KeychainClient (scripts/check-consumer), then what make install
# lays out (scripts/check-install), then README.md's commands as a new user runs them
# (scripts/readme-walk), then a short smoke of each fuzz target (scripts/fuzz
# --smoke), then the throw-away PostgreSQL cluster that sync's tests will stand on
# (scripts/test-pg-cluster). KEYCHAIND_INSECURE_FAST_KDF=1
# lowers Argon2id to libsodium's minimum for speed; never set it for a real daemon.
# scripts/fetch-toml-test fetches toml-test's cases (once) for the TOML decoder's tests.
test: deps pam
	scripts/fetch-toml-test
	KEYCHAIND_INSECURE_FAST_KDF=1 SWIFT=$(SWIFT) scripts/swift-test
	scripts/test-python
	scripts/check-consumer
	scripts/check-install
	scripts/readme-walk
	scripts/fuzz --smoke
	scripts/test-pg-cluster

# Each libFuzzer target of Tests/Fuzz for FUZZ_SECONDS (default 60); docs/security.md, "Fuzzing".
FUZZ_SECONDS ?= 60
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz

bench: deps pkcs11 .build/pkcs11/keychain-pkcs11-bench
	$(SWIFT) run -c release keychain-bench

clean:
	rm -rf .build

# Man pages from their scdoc sources (scripts/install-deps installs scdoc).
man: $(MANPAGES)
$(GENERATED)/man/%: man/%.scd
	@mkdir -p $(dir $@)
	scdoc < $< > $@

# Paths in the units and the config's comments follow PREFIX and SYSCONFDIR.
SUBSTITUTE = sed -e 's|@BINDIR@|$(BINDIR)|g' \
	-e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' -e 's|@DOCDIR@|$(DOCDIR)|g'

# Every file gets its mode from here, not from the caller's umask: under umask 000 the
# shell's `>` made world-writable completion scripts. Each file's mode is set with install -m
# or chmod; the sub-make's umask 022 also closes the moment between `>` and chmod.
install: deps man pam
	umask 022 && $(MAKE) --no-print-directory install-files

install-files:
	for product in $(PRODUCTS); do $(SWIFT) build $(SWIFT_BUILD_FLAGS) --product $$product || exit 1; done
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(USERUNITDIR) \
		$(DESTDIR)$(SYSCONFDIR)/keychaind $(DESTDIR)$(DOCDIR) $(DESTDIR)$(BASHCOMPDIR) \
		$(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	install -m 0755 $(addprefix $(BUILT)/,$(PRODUCTS)) $(DESTDIR)$(BINDIR)/
	$(MAKE) --no-print-directory pkcs11
	install -d $(DESTDIR)$(PKCS11DIR) $(DESTDIR)$(P11KITMODULEDIR)
	install -m 0644 $(PKCS11_MODULE) $(DESTDIR)$(PKCS11DIR)/
	printf 'module: %s\ncritical: no\n' $(PKCS11DIR)/libkeychaind-pkcs11.so > $(DESTDIR)$(P11KITMODULEDIR)/keychaind.module
	chmod 0644 $(DESTDIR)$(P11KITMODULEDIR)/keychaind.module
	for unit in Config/systemd/system/*; do \
		$(SUBSTITUTE) $$unit > $(DESTDIR)$(UNITDIR)/$$(basename $$unit) && chmod 0644 $(DESTDIR)$(UNITDIR)/$$(basename $$unit); done
	for unit in Config/systemd/user/*; do \
		$(SUBSTITUTE) $$unit > $(DESTDIR)$(USERUNITDIR)/$$(basename $$unit) && chmod 0644 $(DESTDIR)$(USERUNITDIR)/$$(basename $$unit); done
	[ -e $(DESTDIR)$(SYSCONFDIR)/keychaind/keychaind.toml ] || install -m 0644 Config/keychaind.toml $(DESTDIR)$(SYSCONFDIR)/keychaind/keychaind.toml
	install -m 0644 Config/apps-example.toml README.md docs/*.md $(DESTDIR)$(DOCDIR)/
	install -d $(DESTDIR)$(SHAREDIR)/dbus-1 $(DESTDIR)$(SHAREDIR)/portal
	for file in Config/dbus-1/*; do \
		$(SUBSTITUTE) $$file > $(DESTDIR)$(SHAREDIR)/dbus-1/$$(basename $$file) && chmod 0644 $(DESTDIR)$(SHAREDIR)/dbus-1/$$(basename $$file); done
	install -m 0644 Config/portal/keychain.portal $(DESTDIR)$(SHAREDIR)/portal/
	for page in $(MANPAGES); do \
		section=$${page##*.}; install -d $(DESTDIR)$(MANDIR)/man$$section; \
		install -m 0644 $$page $(DESTDIR)$(MANDIR)/man$$section/; done
	$(BUILT)/keychain completion bash > $(DESTDIR)$(BASHCOMPDIR)/keychain
	$(BUILT)/keychain completion zsh > $(DESTDIR)$(ZSHCOMPDIR)/_keychain
	$(BUILT)/keychain completion fish > $(DESTDIR)$(FISHCOMPDIR)/keychain.fish
	chmod 0644 $(DESTDIR)$(BASHCOMPDIR)/keychain $(DESTDIR)$(ZSHCOMPDIR)/_keychain $(DESTDIR)$(FISHCOMPDIR)/keychain.fish
	install -d $(DESTDIR)$(PAMDIR) $(DESTDIR)$(PAMCONFIGDIR)
	install -m 0644 $(PAM_MODULE) $(DESTDIR)$(PAMDIR)/pam_keychaind.so
	install -m 0644 pam/pam-config $(DESTDIR)$(PAMCONFIGDIR)/keychaind
	install -d $(DESTDIR)$(POLKITACTIONDIR)
	install -m 0644 Config/polkit/org.keychaind.presence.policy $(DESTDIR)$(POLKITACTIONDIR)/

# Removes what install put there, except the config file (it may hold local changes).
uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(PRODUCTS))
	rm -f $(DESTDIR)$(PKCS11DIR)/libkeychaind-pkcs11.so $(DESTDIR)$(P11KITMODULEDIR)/keychaind.module
	rm -rf $(DESTDIR)$(DOCDIR) $(DESTDIR)$(SHAREDIR)
	for unit in Config/systemd/system/*; do rm -f $(DESTDIR)$(UNITDIR)/$$(basename $$unit); done
	for unit in Config/systemd/user/*; do rm -f $(DESTDIR)$(USERUNITDIR)/$$(basename $$unit); done
	for page in $(notdir $(MANPAGES)); do rm -f $(DESTDIR)$(MANDIR)/man$${page##*.}/$$page; done
	rm -f $(DESTDIR)$(BASHCOMPDIR)/keychain $(DESTDIR)$(ZSHCOMPDIR)/_keychain $(DESTDIR)$(FISHCOMPDIR)/keychain.fish
	rm -f $(DESTDIR)$(PAMDIR)/pam_keychaind.so $(DESTDIR)$(PAMCONFIGDIR)/keychaind
	rm -f $(DESTDIR)$(POLKITACTIONDIR)/org.keychaind.presence.policy

# A Debian package, checked by lintian (errors fail the build).
deb:
	scripts/install-deps lintian
	scripts/make-deb
	lintian --fail-on error keychaind_*_$$(dpkg --print-architecture).deb

# The package proved on clean Debian 12 roots (debootstrap): installed and run without a Swift
# toolchain, then booted under systemd (nspawn) for socket activation, the service user, reload
# and the exposure target, and a user's login through PAM (scripts/boot-checks/login). Needs root;
# not part of `make test` (a release build and two roots). Time, measured on the shared two-core
# machine: debootstrap of the clean root 3m46s the first time (kept in /var/tmp after), then
# check-deb-boot 5-8 min a run (apt in the container, the boot, three logins), besides make deb.
check-package: deb
	scripts/check-deb keychaind_*_$$(dpkg --print-architecture).deb
	scripts/check-deb-boot keychaind_*_$$(dpkg --print-architecture).deb
