/* Frame codec: round trips, and refusal (with a message naming the field) of truncated, oversized,
 * hostile and semantically invalid frames. With --write-seeds DIR it writes the valid frames used
 * as the fuzz seed corpus (tests/fuzz/corpus/fuzz_frame). */
#include "test_main.h"

#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "ipc/frame.h"
#include "specd/accept.h"

typedef struct built {
    uint8_t *bytes;
    size_t len;
} built;

static built pack(const SpecdWire__Envelope *e) {
    built b = {0};
    specd_error err;
    assert_int_equal(specd_ipc_frame_encode(e, 0, &b.bytes, &b.len, &err), SPECD_OK);
    return b;
}

/* Each builder fills an envelope from stack storage and packs it. */
static built make_hello(void) {
    SpecdWire__ModelFingerprint m = SPECD_WIRE__MODEL_FINGERPRINT__INIT;
    m.vocab_size = 49152;
    m.tokenizer_hash = 0x1234567890abcdefULL;
    SpecdWire__Hello h = SPECD_WIRE__HELLO__INIT;
    h.major = SPECD_IPC_MAJOR;
    h.schema_hash = 42;
    h.model = &m;
    h.role = SPECD_WIRE__ROLE__ROLE_HOST;
    SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
    e.request_id = 1;
    e.body_case = SPECD_WIRE__ENVELOPE__BODY_HELLO;
    e.hello = &h;
    return pack(&e);
}

static built make_open(float temperature) {
    uint32_t prompt[] = {1, 9690, 198, 2, 49151};
    SpecdWire__SamplingParams s = SPECD_WIRE__SAMPLING_PARAMS__INIT;
    s.temperature = temperature;
    s.has_top_p = 1;
    s.top_p = 0.9f;
    SpecdWire__OpenSeq o = SPECD_WIRE__OPEN_SEQ__INIT;
    o.seq_id = 7;
    o.n_prompt = 5;
    o.prompt = prompt;
    o.sampling = &s;
    o.seed = 99;
    o.policy = "ngram";
    SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
    e.request_id = 2;
    e.body_case = SPECD_WIRE__ENVELOPE__BODY_OPEN_SEQ;
    e.open_seq = &o;
    return pack(&e);
}

static built make_verify(uint64_t dim0, int32_t parent3, int dtype) {
    uint32_t draft[8] = {5, 6, 7, 8, 9, 10, 11, 12};
    int32_t parents[8] = {-1, 0, 1, parent3, 3, 4, 5, 6};
    uint64_t shape[2] = {dim0, 49152};
    SpecdWire__BufferRef r = SPECD_WIRE__BUFFER_REF__INIT;
    r.buffer_id = 3;
    r.offset = 4096;
    r.n_shape = 2;
    r.shape = shape;
    r.dtype = (SpecdWire__DType)dtype;
    r.seq = 17;
    SpecdWire__Verify v = SPECD_WIRE__VERIFY__INIT;
    v.seq_id = 7;
    v.step = 3;
    v.n_draft_tokens = 8;
    v.draft_tokens = draft;
    v.n_parents = 8;
    v.parents = parents;
    v.target_logits = &r;
    SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
    e.request_id = 3;
    e.body_case = SPECD_WIRE__ENVELOPE__BODY_VERIFY;
    e.verify = &v;
    return pack(&e);
}

static built make_attach(const char *name) {
    SpecdWire__BufferDesc d = SPECD_WIRE__BUFFER_DESC__INIT;
    d.buffer_id = 3;
    d.kind = SPECD_WIRE__BUFFER_KIND__BUFFER_SHM;
    d.bytes = 1 << 20;
    d.shm_name = (char *)name;
    SpecdWire__AttachBuffer a = SPECD_WIRE__ATTACH_BUFFER__INIT;
    a.desc = &d;
    SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
    e.request_id = 4;
    e.body_case = SPECD_WIRE__ENVELOPE__BODY_ATTACH_BUFFER;
    e.attach_buffer = &a;
    return pack(&e);
}

static built make_result(void) {
    uint32_t emitted[3] = {5, 6, 77};
    SpecdWire__PositionStat st[3], *stp[3];
    for (int i = 0; i < 3; i++) {
        SpecdWire__PositionStat init = SPECD_WIRE__POSITION_STAT__INIT;
        st[i] = init;
        st[i].accept_prob = 0.5f;
        st[i].accepted = i < 2;
        stp[i] = &st[i];
    }
    SpecdWire__Result r = SPECD_WIRE__RESULT__INIT;
    r.seq_id = 7;
    r.step = 3;
    r.accepted = 2;
    r.n_emitted = 3;
    r.emitted = emitted;
    r.n_stats = 3;
    r.stats = stp;
    SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
    e.request_id = 3;
    e.body_case = SPECD_WIRE__ENVELOPE__BODY_RESULT;
    e.result = &r;
    return pack(&e);
}

static built make_propose(void) {
    uint32_t commit[2] = {5, 6};
    SpecdWire__Propose p = SPECD_WIRE__PROPOSE__INIT;
    p.seq_id = 7;
    p.step = 4;
    p.n_commit_tokens = 2;
    p.commit_tokens = commit;
    SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
    e.request_id = 5;
    e.body_case = SPECD_WIRE__ENVELOPE__BODY_PROPOSE;
    e.propose = &p;
    return pack(&e);
}

static specd_ipc_decoder *new_decoder(size_t max_frame) {
    specd_ipc_decoder *d = NULL;
    assert_int_equal(specd_ipc_decoder_create(max_frame, &d, NULL), SPECD_OK);
    return d;
}

static specd_status decode(specd_ipc_decoder *d, built b, specd_error *err) {
    const SpecdWire__Envelope *e = NULL;
    specd_status s = specd_ipc_frame_decode(d, b.bytes, b.len, &e, err);
    assert_true((s == SPECD_OK) == (e != NULL));
    return s;
}

static void expect_refused(specd_ipc_decoder *d, built b, const char *needle) {
    specd_error err;
    specd_status s = decode(d, b, &err);
    assert_int_equal(s, SPECD_E_FORMAT);
    if (!strstr(err.message, needle)) fail_msg("message '%s' lacks '%s'", err.message, needle);
}

static void test_round_trips(void **state) {
    (void)state;
    specd_ipc_decoder *d = new_decoder(0);
    built all[] = {make_hello(),         make_open(0.7f),
                   make_verify(9, 2, 0), make_attach("/specd-1-2-3"),
                   make_result(),        make_propose()};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        const SpecdWire__Envelope *e = NULL;
        specd_error err;
        specd_status s = specd_ipc_frame_decode(d, all[i].bytes, all[i].len, &e, &err);
        if (s != SPECD_OK) fail_msg("frame %zu: %s", i, err.message);
        /* Re-packing what was decoded gives the same bytes. */
        uint8_t *again = NULL;
        size_t len = 0;
        assert_int_equal(specd_ipc_frame_encode(e, 0, &again, &len, NULL), SPECD_OK);
        assert_int_equal(len, all[i].len);
        assert_memory_equal(again, all[i].bytes, len);
        specd_free(again);
    }
    const SpecdWire__Envelope *e = NULL;
    assert_int_equal(specd_ipc_frame_decode(d, all[2].bytes, all[2].len, &e, NULL), SPECD_OK);
    assert_int_equal(e->body_case, SPECD_WIRE__ENVELOPE__BODY_VERIFY);
    assert_int_equal(e->verify->n_draft_tokens, 8);
    assert_int_equal(e->verify->target_logits->shape[1], 49152);
    assert_int_equal(e->verify->target_logits->seq, 17);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        specd_free(all[i].bytes);
    specd_ipc_decoder_destroy(d);
}

/* One accept-rule enum (include/specd/accept.h): the wire's AcceptRule names the same rules
 * with the same values, every rule survives the wire both ways, an absent rule and a
 * zero-initialized specd_ipc_seq_params mean COUPLED, and anything else is refused. */
static built make_open_rule(int has_rule, int rule) {
    uint32_t prompt[] = {1, 2};
    SpecdWire__SamplingParams sp = SPECD_WIRE__SAMPLING_PARAMS__INIT;
    SpecdWire__OpenSeq o = SPECD_WIRE__OPEN_SEQ__INIT;
    o.seq_id = 3;
    o.n_prompt = 2;
    o.prompt = prompt;
    o.sampling = &sp;
    o.has_rule = has_rule;
    o.rule = (SpecdWire__AcceptRule)rule;
    SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
    e.request_id = 5;
    e.body_case = SPECD_WIRE__ENVELOPE__BODY_OPEN_SEQ;
    e.open_seq = &o;
    return pack(&e);
}

static void test_accept_rule_is_one_enum(void **state) {
    (void)state;
    static const struct {
        const char *wire_name;
        specd_accept_rule rule;
    } rules[] = {{"ACCEPT_COUPLED", SPECD_ACCEPT_COUPLED},
                 {"ACCEPT_GREEDY", SPECD_ACCEPT_GREEDY},
                 {"ACCEPT_REJECTION", SPECD_ACCEPT_REJECTION}};
    const ProtobufCEnumDescriptor *wd = &specd_wire__accept_rule__descriptor;
    assert_int_equal(wd->n_values, 3); /* a rule added on one side only fails here */
    for (unsigned i = 0; i < wd->n_values; i++) {
        size_t k = 0;
        while (k < 3 && strcmp(rules[k].wire_name, wd->values[i].name) != 0) k++;
        if (k == 3) fail_msg("wire rule %s has no specd_accept_rule", wd->values[i].name);
        assert_int_equal(wd->values[i].value, (int)rules[k].rule);
    }
    specd_ipc_decoder *d = new_decoder(0);
    specd_error err;
    for (size_t k = 0; k < 3; k++) {
        specd_accept_params ap = specd_accept_default_params();
        ap.rule = rules[k].rule;
        ap.max_vocab = 8;
        specd_accept *a = NULL;
        assert_int_equal(specd_accept_create(&ap, &a, &err), SPECD_OK); /* a rule to the engine */
        specd_accept_destroy(a);
        built b = make_open_rule(1, (int)specd_ipc_rule_to_wire(rules[k].rule));
        const SpecdWire__Envelope *e = NULL;
        assert_int_equal(specd_ipc_frame_decode(d, b.bytes, b.len, &e, &err), SPECD_OK);
        assert_int_equal(specd_ipc_rule_from_wire(e->open_seq), rules[k].rule);
        specd_free(b.bytes);
    }
    built b = make_open_rule(0, 0);
    const SpecdWire__Envelope *e = NULL;
    assert_int_equal(specd_ipc_frame_decode(d, b.bytes, b.len, &e, &err), SPECD_OK);
    assert_int_equal(specd_ipc_rule_from_wire(e->open_seq), SPECD_ACCEPT_COUPLED);
    specd_free(b.bytes);
    specd_ipc_seq_params zero = {0};
    assert_int_equal(zero.rule, SPECD_ACCEPT_COUPLED);
    assert_int_equal(specd_accept_default_params().rule, SPECD_ACCEPT_COUPLED);
    b = make_open_rule(1, 3);
    expect_refused(d, b, "unknown accept rule 3");
    specd_free(b.bytes);
    specd_ipc_decoder_destroy(d);
}

static void test_truncated_and_garbage(void **state) {
    (void)state;
    specd_ipc_decoder *d = new_decoder(0);
    built b = make_verify(9, 2, 0);
    /* Every proper prefix is refused, never crashes (most are malformed; none is valid because
     * required fields or nested lengths are cut). */
    for (size_t n = 0; n < b.len; n++) {
        built p = {b.bytes, n};
        specd_error err;
        assert_int_equal(decode(d, p, &err), SPECD_E_FORMAT);
    }
    uint8_t junk[64];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(0xff - i * 7);
    built j = {junk, sizeof junk};
    expect_refused(d, j, "not a valid Envelope");
    specd_free(b.bytes);
    specd_ipc_decoder_destroy(d);
}

static void test_size_checked_before_unpack(void **state) {
    (void)state;
    built h = make_hello();
    built b = make_verify(9, 2, 0);
    assert_true(b.len > h.len);
    specd_ipc_decoder *d = new_decoder(h.len);
    char needle[64];
    snprintf(needle, sizeof needle, "exceeds the limit of %zu", h.len);
    expect_refused(d, b, needle);
    specd_free(b.bytes);
    /* The encoder refuses to produce an oversized frame too. */
    uint8_t *out = NULL;
    size_t len = 0;
    specd_error err;
    const SpecdWire__Envelope *e = NULL;
    assert_int_equal(specd_ipc_frame_decode(d, h.bytes, h.len, &e, NULL), SPECD_OK);
    assert_int_equal(specd_ipc_frame_encode(e, 4, &out, &len, &err), SPECD_E_INVALID_ARG);
    assert_null(out);
    specd_free(h.bytes);
    specd_ipc_decoder_destroy(d);
}

static void test_bounded_allocator(void **state) {
    (void)state;
    /* A frame repeating an empty sub-message of the oneof (field 15, DetachBuffer): 2 bytes on
     * the wire, a fresh struct each once unpacked (protobuf-c frees the previous one, which
     * the arena does not reclaim). The arena refuses instead of growing. */
    size_t max = 1 << 16;
    specd_ipc_decoder *d = new_decoder(max);
    built h = make_hello();
    size_t n = max - 8;
    uint8_t *buf = specd_alloc(n);
    memcpy(buf, h.bytes, h.len);
    for (size_t i = h.len; i + 1 < n; i += 2) {
        buf[i] = (15 << 3) | 2; /* field 15, length-delimited, length 0 */
        buf[i + 1] = 0;
    }
    built b = {buf, n - ((n - h.len) % 2)};
    expect_refused(d, b, "needs more than");
    /* The decoder is still usable afterwards. */
    specd_error err;
    assert_int_equal(decode(d, h, &err), SPECD_OK);
    specd_free(buf);
    specd_free(h.bytes);
    specd_ipc_decoder_destroy(d);
}

static void test_semantic_checks(void **state) {
    (void)state;
    specd_ipc_decoder *d = new_decoder(0);
    struct {
        built b;
        const char *needle;
    } cases[] = {
        {make_verify(0, 2, 0), "shape[0] = 0"},
        {make_verify(9, 3, 0), "parents[3] = 3"},
        {make_verify(9, -2, 0), "parents[3] = -2"},
        {make_verify(9, 2, 9), "unknown dtype 9"},
        {make_verify((uint64_t)1 << 62, 2, 0), "overflows"},
        {make_open(NAN), "temperature"},
        {make_open(-1.0f), "temperature"},
        {make_attach("/../../etc/passwd"), "shm name has character"},
        {make_attach("noslash"), "bad shm name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        expect_refused(d, cases[i].b, cases[i].needle);
        specd_free(cases[i].b.bytes);
    }
    /* An envelope without a body. */
    SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
    e.request_id = 9;
    built empty = pack(&e);
    expect_refused(d, empty, "no body");
    specd_free(empty.bytes);
    specd_ipc_decoder_destroy(d);
}

static void test_unknown_fields_refused(void **state) {
    (void)state;
    specd_ipc_decoder *d = new_decoder(0);
    built h = make_hello();
    uint8_t buf[128];
    memcpy(buf, h.bytes, h.len);
    /* Field 99 (varint) at the top level: not in this schema. */
    buf[h.len] = 0x98; /* (99 << 3) | 0 as a varint */
    buf[h.len + 1] = 0x06;
    buf[h.len + 2] = 1;
    built b = {buf, h.len + 3};
    expect_refused(d, b, "unknown to this schema");
    /* Field number 0 inside a nested BufferRef (what the fuzzer found first). */
    built v = make_verify(9, 2, 0);
    specd_error err;
    assert_int_equal(decode(d, v, &err), SPECD_OK);
    specd_free(v.bytes);
    specd_free(h.bytes);
    FILE *f = NULL;
    const char *src = getenv("SPECD_SOURCE_DIR");
    if (src) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tests/fuzz/corpus/fuzz_frame/regress-field-number-0", src);
        f = fopen(path, "rb");
    }
    if (f) {
        uint8_t r[256];
        size_t n = fread(r, 1, sizeof r, f);
        fclose(f);
        built rb = {r, n};
        assert_int_equal(decode(d, rb, &err), SPECD_E_FORMAT);
    }
    specd_ipc_decoder_destroy(d);
}

static int write_seeds(const char *dir) {
    built all[] = {make_hello(),         make_open(0.7f),
                   make_verify(9, 2, 0), make_attach("/specd-1-2-3"),
                   make_result(),        make_propose()};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/seed-%zu", dir, i);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(all[i].bytes, 1, all[i].len, f) != all[i].len) return 1;
        fclose(f);
        specd_free(all[i].bytes);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) return write_seeds(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_truncated_and_garbage),
        cmocka_unit_test(test_accept_rule_is_one_enum),
        cmocka_unit_test(test_size_checked_before_unpack),
        cmocka_unit_test(test_bounded_allocator),
        cmocka_unit_test(test_semantic_checks),
        cmocka_unit_test(test_unknown_fields_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
