# floodgate - distributed traffic control in Redis.
#
#   make            build build/floodgate.so
#   make run        install what is missing, build, start redis-server with the module
#   make test       unit tests (plain and sanitized) and integration tests
#   make test-servers SERVERS="/path/redis-server /path/valkey-server ..."
#                   the integration tests against each server (docs/servers.md)
#   make test-nginx NGINX="/path/nginx-1.30.4/objs/nginx ..."
#                   the nginx module's tests on Debian's nginx and on each
#                   nginx built from source (docs/nginx.md)
#   make fuzz       property fuzzing of the Bloom filters, the rate limiters,
#                   the locks and the unique counters (FUZZ_SECONDS=600 each)
#   make fuzz-server, make soak   corrupted payloads, replication under load (FUZZ_SCALE=20)
#   make bench      throughput and memory benchmarks (bench/README.md)
#   make install PREFIX=/usr/local [DESTDIR=...]   everything under PREFIX,
#                   the nginx module too (docs/install.md); make uninstall
#   make install-nginx   the nginx module for Debian's nginx, enabled
#                   (docs/nginx.md); make uninstall-nginx

CC       ?= cc
PORT     ?= 6379
PYTHON   := /usr/bin/python3
BUILD    := build
WARNINGS := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE $(WARNINGS)

CORE_SRC   := $(wildcard src/core/*.c)
# The server scripts (src/scripts/*.lua) become C at build time
# (scripts/gen-scripts.sh): each family's EVALSHA script and its SHA1, and
# the Functions library, which is also $(BUILD)/floodgate-functions.lua.
# A new family's file needs nothing here.
SCRIPT_SRC := $(wildcard src/scripts/*.lua src/scripts/fast/*.lua)
GEN_SRC    := $(BUILD)/gen/scripts.c
FUNCTIONS  := $(BUILD)/floodgate-functions.lua
CLIENT_SRC := $(wildcard src/client/*.c src/client/*/*.c) $(GEN_SRC)
MODULE_SRC := $(wildcard src/module/*.c)
HEADERS    := $(wildcard include/*.h src/core/*.h src/client/*.h src/client/*/*.h src/module/*.h)
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BINS  := $(patsubst tests/unit/%.c,$(BUILD)/unit/%,$(UNIT_SRC))
ASAN_BINS  := $(patsubst tests/unit/%.c,$(BUILD)/unit-asan/%,$(UNIT_SRC))
TSAN_BINS  := $(patsubst tests/unit/%.c,$(BUILD)/unit-tsan/%,$(UNIT_SRC))
UNIT_LIBS  := -lcmocka -lhiredis -lconfig -lm -lpthread

# libfloodgate: the core and the client, static and shared (versioned, with
# only the functions of include/floodgate.h exported).
VERSION    := $(shell sed -n 's/^\#define FLOODGATE_VERSION "\(.*\)"/\1/p' include/floodgate.h)
SO_MAJOR   := $(firstword $(subst ., ,$(VERSION)))
LIB_OBJ    := $(patsubst %.c,$(BUILD)/obj/%.o,$(CORE_SRC) $(CLIENT_SRC))
LIB_A      := $(BUILD)/libfloodgate.a
LIB_SO     := $(BUILD)/libfloodgate.so.$(VERSION)
PREFIX     ?= /usr/local
STAGE      := $(CURDIR)/$(BUILD)/stage
CLIENT_TEST_SRC  := $(wildcard tests/client/*.c)
CLIENT_TEST_BINS := $(patsubst tests/client/%.c,$(BUILD)/client/%,$(CLIENT_TEST_SRC))
CLI_SRC    := $(wildcard src/cli/*.c)
# The Python package, installed in Debian's layout; it finds the library
# relative to itself (PREFIX/lib), so no LD_LIBRARY_PATH whatever the prefix.
PYTHON_SRC := $(wildcard bindings/python/floodgate/*.py)
PYTHON_DIR  = $(PREFIX)/lib/python3/dist-packages
SANITIZE   := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
NGINX_SRC   := /usr/share/nginx/src
NGINX_BUILD := $(BUILD)/nginx
NGINX_SO    := $(NGINX_BUILD)/objs/ngx_http_floodgate_module.so

FUZZ_SECONDS ?= 600

.PHONY: all module library cli install uninstall install-nginx uninstall-nginx nginx example-check deps run test unit unit-asan unit-tsan fuzz fuzz-smoke fuzz-server soak integration test-servers test-nginx bench bench-mem bench-client bench-server bench-nginx bench-python clean

all: module library cli

module: $(BUILD)/floodgate.so

$(BUILD)/floodgate.so: $(CORE_SRC) $(MODULE_SRC) $(HEADERS)
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -shared -Wl,-z,defs \
		-o $@ $(CORE_SRC) $(MODULE_SRC) -lm
	@chmod +x $@

$(GEN_SRC) $(FUNCTIONS) &: scripts/gen-scripts.sh $(SCRIPT_SRC)
	sh scripts/gen-scripts.sh src/scripts $(BUILD)

$(BUILD)/obj/%.o: %.c $(HEADERS) include/floodgate.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -Iinclude -Isrc/core -Isrc/client -c -o $@ $<

$(LIB_A): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(LIB_SO): $(LIB_OBJ) src/client/libfloodgate.map
	$(CC) -shared -Wl,-soname,libfloodgate.so.$(SO_MAJOR) -Wl,-z,defs \
		-Wl,--version-script=src/client/libfloodgate.map -o $@ $(LIB_OBJ) -lhiredis -lconfig -lpthread -lm

library: $(LIB_A) $(LIB_SO) $(FUNCTIONS)

# Test programs of the client library, driven by tests/integration.
$(BUILD)/client/async_client: tests/client/async_client.c tests/client/limit_text.h $(LIB_A) \
		include/floodgate_async.h include/floodgate_libevent.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iinclude -o $@ $< $(LIB_A) -lhiredis -lconfig -levent -lm -lpthread

$(BUILD)/client/%: tests/client/%.c tests/client/limit_text.h $(LIB_A) include/floodgate.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iinclude -Isrc/core -Isrc/client -o $@ $< $(LIB_A) -lhiredis -lconfig -lm -lpthread

# The tool is a user of the library like any other: the public header only,
# linked to the shared library (found next to it in build/, or in ../lib
# once installed); doctor and lock info ask a server through hiredis
# (src/cli/server.c), reading URLs with the library's own parser.
LIB_SONAME := $(BUILD)/libfloodgate.so.$(SO_MAJOR)
# Linked in too: the .so hides them through its version script, so no symbol meets another.
CLI_LIB_OBJ := $(BUILD)/obj/src/client/url.o $(BUILD)/obj/src/client/error.o

$(LIB_SONAME): $(LIB_SO)
	ln -sf $(notdir $(LIB_SO)) $@

$(BUILD)/floodgate: $(CLI_SRC) src/cli/cli.h $(CLI_LIB_OBJ) $(LIB_SONAME) include/floodgate.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iinclude -o $@ $(CLI_SRC) $(CLI_LIB_OBJ) $(LIB_SONAME) -lhiredis -lm \
		-Wl,-rpath,'$$ORIGIN:$$ORIGIN/../lib'

cli: $(if $(CLI_SRC),$(BUILD)/floodgate)

# Unit tests link the core and the client compiled once per build kind
# (plain: the library's objects; ASan+UBSan; TSan), not once per test.
ASAN_OBJ := $(patsubst %.c,$(BUILD)/obj-asan-pic/%.o,$(CORE_SRC) $(CLIENT_SRC))
TSAN_OBJ := $(patsubst %.c,$(BUILD)/obj-tsan/%.o,$(CORE_SRC) $(CLIENT_SRC))
UNIT_INCLUDES := -Iinclude -Isrc/core -Isrc/client
.SECONDARY: $(ASAN_OBJ) $(TSAN_OBJ)

$(BUILD)/obj-asan-pic/%.o: %.c $(HEADERS) include/floodgate.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O1 -fPIC $(SANITIZE) $(UNIT_INCLUDES) -c -o $@ $<

# libfloodgate on those objects, for the Python binding's tests under the
# sanitizers (tests/integration/test_python_asan.py).
ASAN_LIB := $(BUILD)/asan/libfloodgate.so.$(SO_MAJOR)
$(ASAN_LIB): $(ASAN_OBJ) src/client/libfloodgate.map
	@mkdir -p $(dir $@)
	$(CC) -shared $(SANITIZE) -Wl,-soname,libfloodgate.so.$(SO_MAJOR) -Wl,-z,defs \
		-Wl,--version-script=src/client/libfloodgate.map -o $@ $(ASAN_OBJ) \
		-lhiredis -lconfig -lpthread -lm

$(BUILD)/obj-tsan/%.o: %.c $(HEADERS) include/floodgate.h
	@mkdir -p $(dir $@)
	clang $(CFLAGS) -O1 -fsanitize=thread $(UNIT_INCLUDES) -c -o $@ $<

$(BUILD)/unit/%: tests/unit/%.c $(LIB_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(UNIT_INCLUDES) -o $@ $< $(LIB_OBJ) $(UNIT_LIBS)

$(BUILD)/unit-asan/%: tests/unit/%.c $(ASAN_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O1 $(SANITIZE) $(UNIT_INCLUDES) -o $@ $< $(ASAN_OBJ) $(UNIT_LIBS)

# The same driver on the ASan+UBSan objects: test_async.py runs both.
$(BUILD)/client/async_client_asan: tests/client/async_client.c tests/client/limit_text.h $(ASAN_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O1 $(SANITIZE) $(UNIT_INCLUDES) -o $@ $< $(ASAN_OBJ) \
		-lhiredis -lconfig -levent -lm -lpthread

$(BUILD)/unit-tsan/%: tests/unit/%.c $(TSAN_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	clang $(CFLAGS) -O1 -fsanitize=thread $(UNIT_INCLUDES) -o $@ $< $(TSAN_OBJ) $(UNIT_LIBS)

$(BUILD)/fuzz/fuzz_limiters: tests/fuzz/fuzz_limiters.c $(CORE_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		-Isrc/core -o $@ $< $(CORE_SRC)

$(BUILD)/fuzz/fuzz_locks: tests/fuzz/fuzz_locks.c $(CORE_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		-Isrc/core -o $@ $< $(CORE_SRC)

# Property fuzzing of the Bloom filters (tests/fuzz/fuzz_bloom.c): a long run
# (FUZZ_SECONDS) and a short one.
.PHONY: fuzz-bloom fuzz-bloom-smoke
$(BUILD)/fuzz/fuzz_bloom: tests/fuzz/fuzz_bloom.c src/core/bloom.c $(HEADERS)
	@mkdir -p $(dir $@)
	clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		-Isrc/core -o $@ $< src/core/bloom.c -lm

fuzz-bloom: $(BUILD)/fuzz/fuzz_bloom
	@mkdir -p $(BUILD)/fuzz/corpus-bloom
	$< -max_total_time=$(FUZZ_SECONDS) $(BUILD)/fuzz/corpus-bloom

fuzz-bloom-smoke: $(BUILD)/fuzz/fuzz_bloom
	@mkdir -p $(BUILD)/fuzz/corpus-bloom
	@$< -max_total_time=10 -print_final_stats=0 $(BUILD)/fuzz/corpus-bloom \
		> $(BUILD)/fuzz/fuzz_bloom.log 2>&1 || { tail -30 $(BUILD)/fuzz/fuzz_bloom.log; exit 1; }
	@tail -1 $(BUILD)/fuzz/fuzz_bloom.log

# Property fuzzing of the unique counters (tests/fuzz/fuzz_uv.c): a long run
# (FUZZ_SECONDS) and a short one. Without compare tracing, which halves the
# speed over 16 KB buckets and finds nothing a script needs; len_control
# lets the scripts grow long within seconds. Failing inputs land in
# build/fuzz/uv-crash-*. The staircase turns from a list into tiles at 48
# entries there, so that both forms and the turn are in reach.
.PHONY: fuzz-uv fuzz-uv-smoke
UV_FUZZ_FLAGS := -len_control=10 -max_len=1024 -artifact_prefix=$(BUILD)/fuzz/uv-
$(BUILD)/fuzz/fuzz_uv: tests/fuzz/fuzz_uv.c tests/fuzz/fuzz_input.h src/core/uv.c $(HEADERS)
	@mkdir -p $(dir $@)
	clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-coverage=trace-cmp \
		-fno-sanitize-recover=all -DFG_UV_LIST_MAX=48 -Isrc/core -o $@ $< src/core/uv.c -lm

fuzz-uv: $(BUILD)/fuzz/fuzz_uv
	@mkdir -p $(BUILD)/fuzz/corpus-uv
	$< -max_total_time=$(FUZZ_SECONDS) $(UV_FUZZ_FLAGS) $(BUILD)/fuzz/corpus-uv

fuzz-uv-smoke: $(BUILD)/fuzz/fuzz_uv
	@mkdir -p $(BUILD)/fuzz/corpus-uv
	@$< -max_total_time=10 $(UV_FUZZ_FLAGS) -print_final_stats=0 $(BUILD)/fuzz/corpus-uv \
		> $(BUILD)/fuzz/fuzz_uv.log 2>&1 || { tail -30 $(BUILD)/fuzz/fuzz_uv.log; exit 1; }
	@tail -1 $(BUILD)/fuzz/fuzz_uv.log

# Property fuzzing of the core: a long run, and a short one inside make test.
fuzz: $(BUILD)/fuzz/fuzz_limiters $(BUILD)/fuzz/fuzz_locks fuzz-bloom fuzz-uv
	@mkdir -p $(BUILD)/fuzz/corpus $(BUILD)/fuzz/corpus-locks
	$< -max_total_time=$(FUZZ_SECONDS) $(BUILD)/fuzz/corpus
	$(BUILD)/fuzz/fuzz_locks -max_total_time=$(FUZZ_SECONDS) $(BUILD)/fuzz/corpus-locks

fuzz-smoke: $(BUILD)/fuzz/fuzz_limiters $(BUILD)/fuzz/fuzz_locks
	@mkdir -p $(BUILD)/fuzz/corpus $(BUILD)/fuzz/corpus-locks
	@$< -max_total_time=20 -print_final_stats=0 $(BUILD)/fuzz/corpus \
		> $(BUILD)/fuzz/fuzz_limiters.log 2>&1 || { tail -30 $(BUILD)/fuzz/fuzz_limiters.log; exit 1; }
	@tail -1 $(BUILD)/fuzz/fuzz_limiters.log
	@$(BUILD)/fuzz/fuzz_locks -max_total_time=10 -print_final_stats=0 $(BUILD)/fuzz/corpus-locks \
		> $(BUILD)/fuzz/fuzz_locks.log 2>&1 || { tail -30 $(BUILD)/fuzz/fuzz_locks.log; exit 1; }
	@tail -1 $(BUILD)/fuzz/fuzz_locks.log

# Corrupted RESTORE payloads and RDB files, and replication under random
# traffic, at FUZZ_SCALE times the size make test runs.
FUZZ_SCALE ?= 20

fuzz-server: module
	FLOODGATE_FUZZ_SCALE=$(FUZZ_SCALE) $(PYTHON) -m pytest -q \
		tests/integration/test_rdb_file.py tests/integration/test_persistence.py \
		tests/integration/test_lock_persistence.py tests/integration/test_bloom_persistence.py \
		-k "corrupt or damaged"

soak: module
	FLOODGATE_FUZZ_SCALE=$(FUZZ_SCALE) $(PYTHON) -m pytest -q tests/integration/test_replication.py \
		tests/integration/test_lock_replication.py tests/integration/test_bloom_replication.py

# The lock torture test (tests/integration/test_lock_torture.py) for
# TORTURE_SECONDS instead of make test's few; the counts land in
# build/torture-report.txt.
TORTURE_SECONDS ?= 300

.PHONY: torture
torture: module $(BUILD)/client/lock_torture
	FLOODGATE_TORTURE_SECONDS=$(TORTURE_SECONDS) $(PYTHON) -m pytest -q -s \
		tests/integration/test_lock_torture.py

deps:
	@scripts/install-deps.sh

unit: $(UNIT_BINS)
	@for t in $(UNIT_BINS); do echo "== $$t"; $$t || exit 1; done

unit-asan: $(ASAN_BINS)
	@for t in $(ASAN_BINS); do echo "== $$t (sanitized)"; \
		ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 $$t || exit 1; done

unit-tsan: $(TSAN_BINS)
	@for t in $(TSAN_BINS); do echo "== $$t (thread sanitizer)"; \
		TSAN_OPTIONS=halt_on_error=1 $$t || exit 1; done

# The integration suite on INTEGRATION_JOBS pytest-xdist workers, a test
# file to a worker (its module fixtures and its order kept); each worker
# starts its own servers, on ports no other process of the suite holds
# (tests/integration/harness.py). Mostly waiting on servers: 4 workers on
# 2 CPUs took a third of one process's time. INTEGRATION_JOBS=0: one process.
INTEGRATION_JOBS ?= 4
PYTEST_INTEGRATION = $(PYTHON) -m pytest -q -n $(INTEGRATION_JOBS) --dist loadfile tests/integration

integration: module $(CLIENT_TEST_BINS) $(BUILD)/client/async_client_asan cli $(NGINX_SO) $(LIB_SONAME) $(ASAN_LIB)
	$(PYTEST_INTEGRATION)

# The integration suite once per server binary; FLOODGATE_REDIS_SERVER names
# the binary to the harness. Goes on after a failing server, and names them.
SERVERS ?= /usr/bin/redis-server

test-servers: module $(CLIENT_TEST_BINS) cli
	@failed=""; for server in $(SERVERS); do \
		echo "== $$server: $$($$server --version)"; \
		FLOODGATE_REDIS_SERVER=$$server $(PYTEST_INTEGRATION) \
			|| failed="$$failed $$server"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-servers failed on:$$failed"; exit 1; fi

# The nginx module's tests once per nginx: Debian's, then each binary of
# NGINX, an nginx built from its source tree with --with-compat
# (<tree>/objs/nginx). The module is built against each tree, in a copy
# under build/nginx-on/ (configure --with-compat, make modules: nginx
# itself is the caller's build). FLOODGATE_NGINX and FLOODGATE_NGINX_MODULE
# name them to the tests (without NGINX, which nginx reads as inherited
# sockets). Goes on after a failing nginx, and names them.
NGINX ?=
PYTEST_NGINX = $(PYTHON) -m pytest -q -n $(INTEGRATION_JOBS) tests/integration/test_nginx.py

test-nginx: module $(CLIENT_TEST_BINS) $(NGINX_SO)
	@failed=""; for bin in /usr/sbin/nginx $(NGINX); do \
		so=$(abspath $(NGINX_SO)); \
		if [ $$bin != /usr/sbin/nginx ]; then \
			tree=$$(cd $$(dirname $$bin)/.. && pwd); out=$(abspath $(BUILD))/nginx-on/$$(basename $$tree); \
			so=$$out/objs/ngx_http_floodgate_module.so; \
			rm -rf $$out && mkdir -p $$(dirname $$out) && cp -a $$tree $$out && \
			( cd $$out && conf=./configure && { [ -x $$conf ] || conf=./auto/configure; } && \
			  FLOODGATE_LIB=$(abspath $(LIB_A)) $$conf --with-compat --with-http_v2_module \
				--add-dynamic-module=$(CURDIR)/nginx > configure.log 2>&1 && \
			  $(MAKE) -f objs/Makefile modules > modules.log 2>&1 ) \
			|| { echo "== $$bin: the module does not build (see $$out)"; failed="$$failed $$bin"; continue; }; \
		fi; \
		echo "== $$($$bin -v 2>&1)"; \
		env -u NGINX FLOODGATE_NGINX=$$bin FLOODGATE_NGINX_MODULE=$$so $(PYTEST_NGINX) \
			|| failed="$$failed $$bin"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-nginx failed on:$$failed"; exit 1; fi

# The nginx module (nginx/), built against Debian's nginx-dev: nginx's
# tree is copied and configured once with Debian's own flags (the module
# must match the binary's), then only the module is rebuilt.

nginx: $(NGINX_SO)

$(NGINX_BUILD)/objs/Makefile: nginx/config
	@rm -rf $(NGINX_BUILD) && mkdir -p $(dir $(NGINX_BUILD))
	cp -a $(NGINX_SRC) $(NGINX_BUILD)
	cd $(NGINX_BUILD) && FLOODGATE_LIB=$(abspath $(LIB_A)) bash -c \
		'. ./conf_flags && ./configure "$${NGX_CONF_FLAGS[@]}" --add-dynamic-module=$(CURDIR)/nginx' \
		> configure.log 2>&1 || { tail -20 configure.log; exit 1; }

$(NGINX_SO): $(wildcard nginx/*.c nginx/*.h) include/floodgate.h include/floodgate_async.h \
		$(LIB_A) $(NGINX_BUILD)/objs/Makefile
	@rm -f $@ # nginx's own Makefile does not know the .so links libfloodgate.a
	$(MAKE) --no-print-directory -C $(NGINX_BUILD) -f objs/Makefile modules

# For Debian's own nginx, in its layout, enabled as Debian's own modules
# are: only when asked, since it changes what the system's nginx loads
# (make install never does). Debian's nginx looks nowhere else, so PREFIX
# has no say; DESTDIR stages it (example-check).
NGINX_DEBIAN_SO   := /usr/lib/nginx/modules/ngx_http_floodgate_module.so
NGINX_DEBIAN_CONF := /usr/share/nginx/modules-available/mod-http-floodgate.conf
NGINX_DEBIAN_LINK := /etc/nginx/modules-enabled/50-mod-http-floodgate.conf

install-nginx: $(NGINX_SO)
	@# NGINX_ROOT staged this before DESTDIR did: refused, not ignored,
	@# since ignoring it would write to the system's nginx.
	@$(if $(NGINX_ROOT),echo "NGINX_ROOT is gone: stage with DESTDIR=$(NGINX_ROOT)" >&2; exit 1)
	install -D -m 644 $(NGINX_SO) $(DESTDIR)$(NGINX_DEBIAN_SO)
	install -d $(DESTDIR)$(dir $(NGINX_DEBIAN_CONF)) $(DESTDIR)$(dir $(NGINX_DEBIAN_LINK))
	echo 'load_module modules/ngx_http_floodgate_module.so;' > $(DESTDIR)$(NGINX_DEBIAN_CONF)
	ln -sf $(NGINX_DEBIAN_CONF) $(DESTDIR)$(NGINX_DEBIAN_LINK)

uninstall-nginx:
	@$(if $(NGINX_ROOT),echo "NGINX_ROOT is gone: stage with DESTDIR=$(NGINX_ROOT)" >&2; exit 1)
	rm -f $(DESTDIR)$(NGINX_DEBIAN_LINK) $(DESTDIR)$(NGINX_DEBIAN_CONF) $(DESTDIR)$(NGINX_DEBIAN_SO)

# The benchmarks are built (not run) by make test, so that none rots.
BENCH_BINS := $(addprefix $(BUILD)/bench/,client_bench server_bench lock_bench bloom_bench uv_bench \
                mem_store_bench)

# Everything make test runs is built first, as many at once as there are
# CPUs; the tests then run one after another (they start servers and
# measure time, and must not crowd each other).
FUZZ_BINS := $(addprefix $(BUILD)/fuzz/,fuzz_limiters fuzz_locks fuzz_bloom fuzz_uv)
TEST_BINS := module cli $(UNIT_BINS) $(ASAN_BINS) $(TSAN_BINS) $(FUZZ_BINS) $(BENCH_BINS) \
             $(CLIENT_TEST_BINS) $(BUILD)/client/async_client_asan $(NGINX_SO) $(LIB_SONAME) $(ASAN_LIB)
JOBS ?= $(shell nproc)

test: deps
	@$(MAKE) --no-print-directory -j$(JOBS) $(TEST_BINS)
	@$(MAKE) --no-print-directory module unit unit-asan unit-tsan fuzz-smoke fuzz-bloom-smoke fuzz-uv-smoke \
		$(BENCH_BINS)
	@$(MAKE) --no-print-directory integration example-check

run: deps module
	@if redis-cli -p $(PORT) ping >/dev/null 2>&1; then \
		echo "port $(PORT) already has a server: stop it, or run PORT=6380 make run"; exit 1; fi
	@echo
	@echo "floodgate: redis-server on 127.0.0.1:$(PORT) with $(BUILD)/floodgate.so"
	@echo "  try:  redis-cli -p $(PORT) CL.THROTTLE user123 15 30 60"
	@echo "        redis-cli -p $(PORT) FG.TOKEN user123 10 2"
	@echo "        redis-cli -p $(PORT) FG.INSPECT user123"
	@echo "  reference: docs/commands.md; stop with Ctrl-C"
	@echo
	redis-server --port $(PORT) --bind 127.0.0.1 --save "" --appendonly no \
		--loadmodule $(CURDIR)/$(BUILD)/floodgate.so

# make install puts everything under PREFIX, nothing elsewhere (the nginx
# module too: make install-nginx is for the system's nginx); make uninstall
# removes the same list, so the two cannot drift apart.
#
# The man pages and the bash completion install when they are there, and
# are required once git tracks them: a tracked file missing from the tree
# fails the install instead of being skipped.
present_or_tracked = $(sort $(wildcard $(1)) $(shell git ls-files -- $(1) 2>/dev/null))
MAN_PAGES  := $(call present_or_tracked,docs/man/floodgate.1 docs/man/floodgate.7)
COMPLETION := $(call present_or_tracked,src/cli/completion.bash)
PUBLIC_HEADERS := include/floodgate.h include/floodgate_async.h include/floodgate_libevent.h
man_path = $(PREFIX)/share/man/man$(subst .,,$(suffix $(1)))/$(notdir $(1))
COMPLETION_PATH = $(PREFIX)/share/bash-completion/completions/floodgate
NGINX_PREFIX_SO = $(PREFIX)/lib/nginx/modules/ngx_http_floodgate_module.so
INSTALLED = $(addprefix $(PREFIX)/include/,$(notdir $(PUBLIC_HEADERS))) \
	$(addprefix $(PREFIX)/lib/,libfloodgate.a libfloodgate.so.$(VERSION) \
	    libfloodgate.so.$(SO_MAJOR) libfloodgate.so pkgconfig/floodgate.pc redis/modules/floodgate.so) \
	$(PREFIX)/bin/floodgate $(NGINX_PREFIX_SO) $(PREFIX)/share/floodgate/floodgate-functions.lua \
	$(addprefix $(PYTHON_DIR)/floodgate/,$(notdir $(PYTHON_SRC))) \
	$(foreach m,$(MAN_PAGES),$(call man_path,$(m))) $(if $(COMPLETION),$(COMPLETION_PATH))

install: module library cli $(NGINX_SO)
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/lib/redis/modules
	install -m 644 $(PUBLIC_HEADERS) $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libfloodgate.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libfloodgate.so.$(SO_MAJOR)
	ln -sf libfloodgate.so.$(SO_MAJOR) $(DESTDIR)$(PREFIX)/lib/libfloodgate.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' floodgate.pc.in \
		> $(DESTDIR)$(PREFIX)/lib/pkgconfig/floodgate.pc
	install -m 755 $(BUILD)/floodgate.so $(DESTDIR)$(PREFIX)/lib/redis/modules/floodgate.so
	install -m 755 $(BUILD)/floodgate $(DESTDIR)$(PREFIX)/bin/floodgate
	install -D -m 644 $(FUNCTIONS) $(DESTDIR)$(PREFIX)/share/floodgate/floodgate-functions.lua
	install -D -m 644 $(NGINX_SO) $(DESTDIR)$(NGINX_PREFIX_SO)
	install -d $(DESTDIR)$(PYTHON_DIR)/floodgate
	install -m 644 $(PYTHON_SRC) $(DESTDIR)$(PYTHON_DIR)/floodgate/
	for m in $(MAN_PAGES); do \
		install -D -m 644 $$m $(DESTDIR)$(PREFIX)/share/man/man$${m##*.}/$${m##*/} || exit 1; done
	$(if $(COMPLETION),install -D -m 644 $(COMPLETION) $(DESTDIR)$(COMPLETION_PATH))

# Also the bytecode Python wrote for the installed modules (importing them
# as root does), and the package's own directory once empty; the shared
# directories (lib, share/man, ...) stay.
uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	rm -f $(foreach m,$(basename $(notdir $(PYTHON_SRC))),$(DESTDIR)$(PYTHON_DIR)/floodgate/__pycache__/$(m).*.pyc)
	rmdir $(DESTDIR)$(PYTHON_DIR)/floodgate/__pycache__ $(DESTDIR)$(PYTHON_DIR)/floodgate 2>/dev/null || true
	rmdir $(DESTDIR)$(PREFIX)/share/floodgate 2>/dev/null || true

# Installs into build/stage and builds examples/ against that copy through
# pkg-config, shared and static, as a user would (docs/client.md); checks the
# exported symbols, the man pages, that nothing is installed outside PREFIX,
# and that make uninstall takes it all back. Every install here has a
# PREFIX or DESTDIR inside build/: make test runs as root in CI, and must
# never write to /usr/local, /usr/lib/nginx or /etc/nginx.
STAGED := $(STAGE).destdir
STAGED_NGINX := $(STAGE).nginx
PC = PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig pkg-config

example-check:
	@rm -rf $(STAGE) $(STAGED) $(STAGED_NGINX)
	@# First under a DESTDIR, and before any install without one, so that a
	@# rule writing outside PREFIX is caught in build/, not run on the
	@# system: every file made must be under DESTDIR/PREFIX, none in PREFIX.
	@$(MAKE) --no-print-directory install PREFIX=$(STAGE) DESTDIR=$(STAGED) >/dev/null
	@outside=$$(find $(STAGED) ! -type d | while read -r f; do \
		case "$$f" in $(STAGED)$(STAGE)/*) ;; *) echo "$$f";; esac; done); \
	 [ -z "$$outside" ] || { echo "make install wrote outside PREFIX: $$outside"; exit 1; }
	@[ ! -e $(STAGE) ] || { echo "make install ignored DESTDIR: $$(find $(STAGE))"; exit 1; }
	@$(MAKE) --no-print-directory install PREFIX=$(STAGE) DESTDIR= >/dev/null
	@test -f $(STAGE)/lib/nginx/modules/ngx_http_floodgate_module.so
	@for m in $(MAN_PAGES); do \
		test -f $(STAGE)/share/man/man$${m##*.}/$${m##*/} || { echo "$$m not installed"; exit 1; }; \
		warnings=$$(groff -k -man -Tutf8 -ww -z $$m 2>&1); \
		[ -z "$$warnings" ] || { echo "$$m: $$warnings"; exit 1; }; done
	@$(if $(COMPLETION),bash -n $(COMPLETION) && test -f $(STAGE)/share/bash-completion/completions/floodgate)
	@echo "example-check: make install writes under PREFIX only; man pages: $(or $(MAN_PAGES),none yet); completion: $(or $(COMPLETION),none yet)"
	@# Linked as docs/client.md says: the rpath is the .pc's libdir, and
	@# the program runs without LD_LIBRARY_PATH.
	$(CC) -o $(BUILD)/example-shared examples/limit.c $$($(PC) --cflags --libs floodgate) \
		-Wl,-rpath,$$($(PC) --variable=libdir floodgate)
	$(CC) -o $(BUILD)/example-static examples/limit.c $$($(PC) --cflags floodgate) \
		$(STAGE)/lib/libfloodgate.a $$($(PC) --static --libs-only-l floodgate | sed 's/-lfloodgate//')
	env -u LD_LIBRARY_PATH $(BUILD)/example-shared >/dev/null && $(BUILD)/example-static >/dev/null
	@exported=$$(nm -D --defined-only $(STAGE)/lib/libfloodgate.so | awk '$$2=="T"{print $$3}' \
		| sed 's/@.*//' | sort | tr '\n' ' '); \
	 expected=$$(grep -o 'fg_[a-z_]*;' src/client/libfloodgate.map | tr -d ';' | sort \
		| tr '\n' ' '); \
	 [ "$$exported" = "$$expected" ] || { echo "exported: $$exported"; exit 1; }
	@echo "example-check: the installed library builds and runs through pkg-config"
	@rm -rf $(STAGE)-moved && cp -a $(STAGE) $(STAGE)-moved
	@for prefix in $(STAGE) $(STAGE)-moved; do \
		env -u LD_LIBRARY_PATH -u FLOODGATE_LIBRARY PYTHONPATH=$$prefix/lib/python3/dist-packages \
		$(PYTHON) -c 'import floodgate, sys; \
			assert floodgate.library_path == sys.argv[1], floodgate.library_path; \
			assert floodgate.Client("mem:").check("k", floodgate.token_bucket(1, 1)).allowed' \
		$$prefix/lib/libfloodgate.so.$(SO_MAJOR) || exit 1; done
	@rm -rf $(STAGE)-moved
	@echo "example-check: the installed Python package loads its library, wherever the prefix"
	@# Debian's layout for the system's nginx, staged.
	@$(MAKE) --no-print-directory install-nginx DESTDIR=$(STAGED_NGINX) >/dev/null
	@test -f $(STAGED_NGINX)$(NGINX_DEBIAN_SO) && test -f $(STAGED_NGINX)$(NGINX_DEBIAN_CONF) \
		&& test "$$(readlink $(STAGED_NGINX)$(NGINX_DEBIAN_LINK))" = $(NGINX_DEBIAN_CONF)
	@# Uninstalls leave directories only (the Python package's bytecode
	@# included: the import above wrote it).
	@$(MAKE) --no-print-directory uninstall PREFIX=$(STAGE) DESTDIR= >/dev/null
	@$(MAKE) --no-print-directory uninstall PREFIX=$(STAGE) DESTDIR=$(STAGED) >/dev/null
	@$(MAKE) --no-print-directory uninstall-nginx DESTDIR=$(STAGED_NGINX) >/dev/null
	@left=$$(find $(STAGE) $(STAGED) $(STAGED_NGINX) ! -type d); \
	 [ -z "$$left" ] || { echo "left after make uninstall: $$left"; exit 1; }
	@echo "example-check: make uninstall and make uninstall-nginx leave nothing but directories"

bench: deps module
	bash bench/run.sh

# Decisions per second of the in-process store (libfloodgate's mem: backend).
bench-mem: $(BUILD)/bench/mem_store_bench
	$<

# Decisions per second through the public API (fg_check on mem:).
bench-client: $(BUILD)/bench/client_bench
	$<

$(BUILD)/bench/client_bench: bench/client_bench.c $(LIB_A) include/floodgate.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O2 -Iinclude -o $@ $< $(LIB_A) -lhiredis -lpthread -lm

# Decisions per second from Python (the binding on mem: and a server, next to
# redis-py running a Lua token bucket).
bench-python: module library
	$(PYTHON) bench/python_bench.py

# Decisions per second against a server, with and without the denial cache.
bench-server: deps module $(BUILD)/bench/server_bench
	bash bench/server_bench.sh

$(BUILD)/bench/server_bench: bench/server_bench.c $(LIB_A) include/floodgate.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O2 -Iinclude -o $@ $< $(LIB_A) -lhiredis -lpthread -lm

# Locks: uncontended throughput against INCR, contended hand-off latency,
# floodgate against SET NX PX polling and a Lua + pub/sub lock.
.PHONY: bench-locks
bench-locks: deps module $(BUILD)/bench/lock_bench
	bash bench/lock_bench.sh

$(BUILD)/bench/lock_bench: bench/lock_bench.c $(LIB_A) include/floodgate.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O2 -Iinclude -o $@ $< $(LIB_A) -lhiredis -lpthread -lm

# Locks at scale: one FG.UNLOCK granting 500-8,000 waiters, semaphores of
# 1,000-40,000 holders; server CPU time (bench/lock_scale.py; a few minutes).
.PHONY: bench-lock-scale
bench-lock-scale: deps module
	$(PYTHON) bench/lock_scale.py

# Bloom filters in process: ns per add, hit and miss, bits per item and the
# measured false-positive rate (bench/bloom_bench.c), pinned to CPU 1.
.PHONY: bench-bloom
bench-bloom: $(BUILD)/bench/bloom_bench
	taskset -c 1 $<

$(BUILD)/bench/bloom_bench: bench/bloom_bench.c src/core/bloom.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O2 -Isrc/core -o $@ $< src/core/bloom.c -lm

# Unique counting in process: ns per add, us per window, bytes and the error
# of ~220 windows against exact counts (bench/uv_bench.c), pinned to CPU 1.
.PHONY: bench-uv
bench-uv: $(BUILD)/bench/uv_bench
	taskset -c 1 $<

$(BUILD)/bench/uv_bench: bench/uv_bench.c src/core/uv.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O2 -Isrc/core -o $@ $< src/core/uv.c -lm

# Unique counting against a server: FG.UVCOUNT LAST 24 HOURS against PFCOUNT
# of 84 minute/hour keys (server time, error, memory), the export, and
# FG.UVADD against PFADD and INCR (bench/uv_server.py; about a minute).
.PHONY: bench-uv-server
bench-uv-server: deps module
	$(PYTHON) bench/uv_server.py

# Memory of unique counters: MEMORY USAGE by items against a server, then
# full counters by items a day in process (bench/uv_server.py MEMORY=1).
.PHONY: bench-uv-memory
bench-uv-memory: deps module $(BUILD)/bench/uv_bench
	MEMORY=1 $(PYTHON) bench/uv_server.py

# Policy checks: FG.CHECK (one and two limits, penalty, shadow, denied)
# against INCR, FG.TOKEN and a Lua two-limit script, instructions per part
# (callgrind) and bytes per key (bench/policy_bench.py; about 5 minutes).
.PHONY: bench-policy
bench-policy: deps module
	$(PYTHON) bench/policy_bench.py

# The hot paths' instructions (callgrind) next to their floor: an empty
# command with the same arguments, reply and replication (bench/hot_paths.py,
# which builds bench/floor_module.c into build/bench/; about 3 minutes).
.PHONY: bench-hot
bench-hot: deps module
	$(PYTHON) bench/hot_paths.py --output bench/results/hot.md

# The script backend: floodgate's rate-limit scripts (EVALSHA, and FCALL)
# on a stock redis-server against the module's commands and the Lua peers
# of bench/lua/peers/, server CPU per decision and P=16 ratios to INCR
# (bench/scripts_bench.py; about 4 minutes).
.PHONY: bench-scripts
bench-scripts: deps module
	$(PYTHON) bench/scripts_bench.py

bench-nginx: deps module $(NGINX_SO)
	$(PYTHON) bench/nginx_bench.py

$(BUILD)/bench/mem_store_bench: bench/mem_store_bench.c $(CORE_SRC) $(CLIENT_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -O2 -Iinclude -Isrc/core -Isrc/client -o $@ $< $(CORE_SRC) $(CLIENT_SRC) \
		-lhiredis -lconfig -lpthread -lm

clean:
	rm -rf $(BUILD)
