/*
 * test_ha.c - failover's pieces that need no etcd (src/ha/): the JSON
 * reader of etcd's replies finds members, elements, numbers (quoted and
 * bare), true and base64 values, and every prefix of a reply cut short is
 * "not found", never a read past it (each cut copied into a buffer of its
 * own size, so a sanitizer build sees an overrun); nesting past the
 * bound is refused; a member's value parses and the ordering of members
 * (position, then term, then the lower name) is total and the same from
 * either side; the fence is closed at 0, open before its deadline, closed
 * after, and a NULL fence is open.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/ha/ha_int.h"
#include "kura/fence.h"
#include "kura/ha.h"
#include "unit.h"

static const char reply[] =
    "{\"header\":{\"cluster_id\":\"3249\",\"revision\":\"118\",\"raft_term\":\"2\"},"
    "\"kvs\":[{\"key\":\"L2t1cmEvYy9sZWFkZXI=\",\"create_revision\":\"2\","
    "\"mod_revision\":\"7\",\"version\":\"1\",\"value\":\"YQ==\",\"lease\":\"-5\"},"
    "{\"key\":\"eA==\",\"value\":\"eXo=\"}],\"count\":\"2\",\"more\":false,"
    "\"succeeded\":true,\"s\":\"a \\\"q\\\" \\\\ b\",\"n\":[1, [2, {\"x\":[]}], 3]}";

static void test_json(void)
{
    json_span top, v, kvs, kv, hdr;
    REQUIRE(json_value(reply, reply + strlen(reply), &top));
    CHECK(top.end == reply + strlen(reply));
    REQUIRE(json_member(top, "header", &hdr));
    REQUIRE(json_member(hdr, "revision", &v));
    CHECK(json_int(v) == 118);
    CHECK(!json_member(top, "revision", &v));   /* members of the top only */
    REQUIRE(json_member(top, "kvs", &kvs));
    REQUIRE(json_element(kvs, 0, &kv));
    REQUIRE(json_member(kv, "key", &v));
    size_t len;
    char *k = json_base64(v, &len);
    REQUIRE(k != NULL);
    CHECK_EQ_STR(k, "/kura/c/leader");
    CHECK(len == 14);
    free(k);
    REQUIRE(json_member(kv, "lease", &v));
    CHECK(json_int(v) == -5);
    REQUIRE(json_element(kvs, 1, &kv));
    REQUIRE(json_member(kv, "value", &v));
    char *val = json_base64(v, &len);
    REQUIRE(val != NULL);
    CHECK_EQ_STR(val, "yz");
    free(val);
    CHECK(!json_element(kvs, 2, &kv));
    REQUIRE(json_member(top, "succeeded", &v));
    CHECK(json_true(v));
    REQUIRE(json_member(top, "more", &v));
    CHECK(!json_true(v));
    char s[64];
    REQUIRE(json_member(top, "s", &v));
    CHECK(json_string(v, s, sizeof(s)));
    CHECK_EQ_STR(s, "a \"q\" \\ b");
    CHECK(json_string(v, s, 4));                /* cut to the room */
    CHECK_EQ_STR(s, "a \"");
    REQUIRE(json_member(top, "n", &v));
    REQUIRE(json_element(v, 2, &kv));
    CHECK(json_int(kv) == 3);
    CHECK(!json_member(v, "x", &kv));           /* an array has no members */
    CHECK(json_base64(kv, &len) == NULL);       /* a number is no string */
}

/* Every prefix of the reply, in a buffer of exactly its size: a whole
 * value only for the whole reply. */
static void test_cut_short(void)
{
    size_t n = strlen(reply);
    for (size_t cut = 0; cut < n; cut++) {
        char *b = malloc(cut ? cut : 1);
        REQUIRE(b != NULL);
        memcpy(b, reply, cut);
        json_span top;
        CHECK(!json_value(b, b + cut, &top));
        free(b);
    }
}

static void test_depth(void)
{
    char deep[300];
    for (int d = 60; d <= 70; d++) {
        int i = 0;
        for (int j = 0; j < d; j++)
            deep[i++] = '[';
        for (int j = 0; j < d; j++)
            deep[i++] = ']';
        json_span v;
        CHECK(json_value(deep, deep + i, &v) == (d <= 65));
    }
}

static void test_members(void)
{
    ha_member a, b, c;
    REQUIRE(ha_member_parse("n1", "addr=10.0.0.1:11211 pos=100 term=3 role=replica lag_ms=2", &a));
    CHECK_EQ_STR(a.addr, "10.0.0.1:11211");
    CHECK_EQ_STR(a.role, "replica");
    CHECK(a.pos == 100 && a.term == 3);
    CHECK(!ha_member_parse("n9", "pos=1", &c));             /* no address */
    CHECK(!ha_member_parse("n9", "addr=x:1", &c));          /* no position */
    REQUIRE(ha_member_parse("n2", "addr=[::1]:11211 pos=100 term=4", &b));
    CHECK(ha_member_better(&b, &a) && !ha_member_better(&a, &b));   /* the term breaks the tie */
    b.term = 3;
    CHECK(ha_member_better(&a, &b) && !ha_member_better(&b, &a));   /* then the lower name */
    b.pos = 101;
    b.term = 0;
    CHECK(ha_member_better(&b, &a) && !ha_member_better(&a, &b));   /* the position first */
    CHECK(!ha_member_better(&a, &a));
}

static void test_fence(void)
{
    kura_fence f = { 0 };
    CHECK(kura_fence_open(NULL));
    CHECK(!kura_fence_open(&f));
    kura_fence_set(&f, kura_fence_now() + 60 * 1000000000LL);
    CHECK(kura_fence_open(&f));
    kura_fence_set(&f, kura_fence_now() - 1);
    CHECK(!kura_fence_open(&f));
    CHECK(ha_margin_ms(2) == 500 && ha_margin_ms(10) == 2000);
}

int main(void)
{
    RUN(test_json);
    RUN(test_cut_short);
    RUN(test_depth);
    RUN(test_members);
    RUN(test_fence);
    UNIT_DONE();
}
