/*
 * ctl_ha.c - kuractl ha: automatic failover's group as etcd holds it
 * (docs/replication.md, "Automatic failover"; kura/ha.h says the keys).
 *
 * status reads every key under /kura/CLUSTER/ once and prints the leader
 * (name, address, term, the seconds its lease has left), each member's
 * position, term, role and lag, and a pending switchover.  switchover
 * NAME puts /kura/CLUSTER/switchover under a lease of its own (so an
 * abandoned one goes away by itself), then polls the leader key until NAME
 * holds it, within --wait: the leader drains (its fence closed), waits
 * until NAME has caught up and lets the key go (src/ha/ha.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"
#include "kura/etcd.h"
#include "kura/ha.h"
#include "kura/proto.h"

#define HA_CTL_TIMEOUT_MS 3000

static int open_etcd(const ctl_args *a, etcd_client **c, char *prefix, size_t plen)
{
    const char *urls = ctl_opt(a, "--etcd"), *cluster = ctl_opt(a, "--cluster"),
               *authf = ctl_opt(a, "--auth"), *user = NULL, *pass = NULL;
    char err[400];
    kura_auth *auth = NULL;
    if (!urls)
        return ctl_usage(a, "--etcd URL[,URL...] names etcd (kurad's -ha-etcd)");
    if (authf && (kura_auth_load(authf, &auth, err, sizeof(err)) < 0 ||
                  kura_auth_first(auth, &user, &pass) < 0)) {
        kura_auth_free(auth);
        return ctl_err(CTL_UNREACHABLE, "--auth %s: cannot read a user:password line", authf);
    }
    snprintf(prefix, plen, "/kura/%s/", cluster ? cluster : "kura");
    int rc = etcd_open(urls, user, pass, ctl_opt(a, "--ca"), HA_CTL_TIMEOUT_MS, c, err,
                       sizeof(err));
    kura_auth_free(auth);
    return rc < 0 ? ctl_err(CTL_USAGE, "--etcd: %s", err) : CTL_OK;
}

static int ha_status(etcd_client *c, const char *prefix)
{
    etcd_kv *kvs;
    int n;
    int64_t rev;
    char key[500];
    if (etcd_range_prefix(c, prefix, &kvs, &n, &rev) < 0)
        return ctl_err(CTL_UNREACHABLE, "etcd: %s", etcd_error(c));
    snprintf(key, sizeof(key), "%sleader", prefix);
    const etcd_kv *leader = NULL;
    for (int i = 0; i < n; i++)
        if (strcmp(kvs[i].key, key) == 0)
            leader = &kvs[i];
    printf("cluster %s on %s (revision %" PRId64 ")\n", prefix, etcd_endpoint(c), rev);
    char lname[HA_NAME_MAX] = "", laddr[300] = "";
    unsigned long long lterm = 0;
    if (leader && sscanf(leader->value, "%127s %299s %llu", lname, laddr, &lterm) >= 2) {
        int ttl = -1;
        etcd_lease_ttl(c, leader->lease, &ttl);
        printf("leader: %s at %s, term %llu, lease %" PRId64 " (%d s left)\n", lname, laddr,
               lterm, leader->lease, ttl);
    } else {
        printf("leader: none (the key is free: an election is due)\n");
    }
    snprintf(key, sizeof(key), "%smembers/", prefix);
    size_t ml = strlen(key);
    for (int i = 0; i < n; i++) {
        ha_member m;
        if (strncmp(kvs[i].key, key, ml) == 0 && ha_member_parse(kvs[i].key + ml, kvs[i].value, &m))
            printf("member %s%s: %s\n", m.name, strcmp(m.name, lname) ? "" : " (leader)",
                   kvs[i].value);
    }
    snprintf(key, sizeof(key), "%sswitchover", prefix);
    for (int i = 0; i < n; i++)
        if (strcmp(kvs[i].key, key) == 0)
            printf("switchover to %s pending\n", kvs[i].value);
    etcd_kvs_free(kvs, n);
    return lname[0] ? CTL_OK : CTL_DIFF;
}

/* The leader's name now: "" when none; -1 when etcd did not answer. */
static int leader_name(etcd_client *c, const char *prefix, char *name, size_t len, bool *member,
                       const char *want)
{
    etcd_kv *kvs;
    int n;
    int64_t rev;
    char lk[500], mk[500];
    if (etcd_range_prefix(c, prefix, &kvs, &n, &rev) < 0)
        return -1;
    snprintf(lk, sizeof(lk), "%sleader", prefix);
    snprintf(mk, sizeof(mk), "%smembers/%s", prefix, want);
    name[0] = '\0';
    *member = false;
    for (int i = 0; i < n; i++) {
        if (strcmp(kvs[i].key, lk) == 0)
            snprintf(name, len, "%.*s", (int)strcspn(kvs[i].value, " "), kvs[i].value);
        *member |= strcmp(kvs[i].key, mk) == 0;
    }
    etcd_kvs_free(kvs, n);
    return 0;
}

static int ha_switchover(etcd_client *c, const char *prefix, const char *target, int wait_s)
{
    char now[HA_NAME_MAX], key[500];
    bool member;
    if (leader_name(c, prefix, now, sizeof(now), &member, target) < 0)
        return ctl_err(CTL_UNREACHABLE, "etcd: %s", etcd_error(c));
    if (!member)
        return ctl_err(CTL_FAIL, "%s is not a member of %s (kuractl ha status lists them)",
                       target, prefix);
    if (strcmp(now, target) == 0) {
        printf("%s leads already\n", target);
        return CTL_OK;
    }
    int64_t lease;
    int granted;
    snprintf(key, sizeof(key), "%sswitchover", prefix);
    if (etcd_lease_grant(c, wait_s + 5, &lease, &granted) < 0 ||
        etcd_put(c, key, target, lease) < 0)
        return ctl_err(CTL_UNREACHABLE, "etcd: %s", etcd_error(c));
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = CTL_FAIL;
    for (;;) {
        if (leader_name(c, prefix, now, sizeof(now), &member, target) == 0 &&
            strcmp(now, target) == 0) {
            printf("%s leads\n", target);
            rc = CTL_OK;
            break;
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec >= wait_s) {
            ctl_err(CTL_FAIL, "%s does not lead after %d s (the leader is %s); the switchover "
                    "is withdrawn", target, wait_s, now[0] ? now : "none");
            break;
        }
        struct timespec pause = { 0, 200 * 1000000 };
        nanosleep(&pause, NULL);
    }
    etcd_lease_revoke(c, lease);        /* the switchover key with it */
    return rc;
}

int cmd_ha(int argc, char **argv)
{
    ctl_args a;
    static const ctl_optdef defs[] = { { "--etcd", true }, { "--cluster", true },
                                       { "--auth", true }, { "--ca", true },
                                       { "--wait", true }, { NULL, false } };
    int rc = ctl_parse(&a, "ha", argc, argv, defs);
    if (rc)
        return rc;
    const char *sub = a.npos ? a.pos[0] : "";
    bool status = strcmp(sub, "status") == 0 && a.npos == 1;
    bool sw = strcmp(sub, "switchover") == 0 && a.npos == 2;
    if (!status && !sw)
        return ctl_usage(&a, "expected 'ha status' or 'ha switchover NAME'");
    uint64_t wait = 60;
    if (ctl_opt(&a, "--wait") && ctl_num(&a, "--wait", ctl_opt(&a, "--wait"), &wait))
        return CTL_USAGE;
    if (wait < 1 || wait > 3600)
        return ctl_usage(&a, "--wait: 1 to 3600 seconds");
    etcd_client *c = NULL;
    char prefix[300];
    if ((rc = open_etcd(&a, &c, prefix, sizeof(prefix))) != CTL_OK)
        return rc;
    rc = status ? ha_status(c, prefix) : ha_switchover(c, prefix, a.pos[1], (int)wait);
    etcd_close(c);
    return rc;
}
