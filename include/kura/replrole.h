/*
 * replrole.h - a server's replication role and term, as the failover
 * code drives them (src/server/replrole.c; docs/replication.md, "Roles
 * and terms" and "Fencing").  The operator's commands (repl promote,
 * follow, reset; Tokyo Tyrant's setmst) and automatic failover (etcd,
 * src/ha/) both go through these calls, so every change of role is
 * persisted (rolefile.h, DIR/role of -ulog) before it is answered, and
 * the term only rises.
 *
 * Threads and locks: every call may be made from any thread but a
 * worker's event loop for the ones marked "blocks" (they stop or start
 * the replica thread: up to its connect timeout, 5 s, plus a sync of the
 * store; the text commands call them from a worker, which then waits).
 * Changes of role are serialized by one lock of their own (repladmin.c's
 * ctl_lock); the state by another, held only to copy or save it.  The
 * readers (repl_role_term, repl_role_is_writable, repl_role_get) take no
 * lock a change holds for long and never block.
 *
 * The calls are valid from the start of replication (start_repl) until
 * its stop (stop_repl, after the workers and the committer have stopped):
 * a thread of the failover code stops before that.
 *
 * Without -ulog nothing is persisted: the role and term live in memory
 * (stats repl's repl_role_persisted is 0) and a restart takes the
 * command line's role with term 0.
 */
#ifndef KURA_REPLROLE_H
#define KURA_REPLROLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kura/rolefile.h"

struct kura_server;

/* Becomes a writable master (blocks).  The term becomes the larger of
 * term + 1 and min_term (0: term + 1), is persisted with the role and
 * source, and only then are writes taken.  A replica stops following
 * (its master's address is kept as the one to probe: a server that
 * comes back there is told of the term); a fenced server is promoted the
 * same way; a master keeps its role and takes the new term (KURA_OK).
 * force: promote while a full copy is arriving (its data is not the
 * master's).  KURA_OK with "PROMOTED <master-pos> <own-last-ts> term=<t>"
 * in msg, or an error with the reply line in msg (SERVER_ERROR ...):
 * nothing changed. */
int repl_role_promote(struct kura_server *srv, uint64_t min_term, role_source source, bool force,
                      char *msg, size_t msglen);

/* Becomes a replica of host:port (blocks).  Refused (KURA_EINVAL, the
 * reply line in msg, nothing changed) when host:port is this server, or
 * when it follows this server up its chain of masters (a loop).  The term
 * becomes the larger of its own and min_term, and rises to the master's
 * when its stream starts; a master whose term is lower than this
 * server's is refused by the stream (state "refused").  The role is
 * persisted before the replica thread starts; writes stop at once.
 * KURA_OK with "OK following host:port" in msg. */
int repl_role_follow(struct kura_server *srv, const char *host, int port, uint64_t min_term,
                     role_source source, char *msg, size_t msglen);

/* A higher term was heard of (a replica's handshake, the master that
 * replaced this one, etcd): if term is above this server's, writes stop
 * at once (before this returns: a write not yet acknowledged is not, with
 * -syncrepl), the term is raised and persisted, and a master's role
 * becomes "fenced" (read-only, no master to follow) until a follow or a
 * promote.  Does not block on the replica thread; saves the file (an
 * fsync).  KURA_OK (fenced, or already at or past term). */
int repl_role_fence(struct kura_server *srv, uint64_t term, const char *why);

/* This server's term (0 until a promote anywhere reached it). */
uint64_t repl_role_term(struct kura_server *srv);

/* True when this server takes and acknowledges writes now: a master, not
 * fenced, and the gate (repl_role_set_gate) says yes. */
bool repl_role_is_writable(struct kura_server *srv);

/* A copy of the state (role, term, source, master, former master). */
void repl_role_get(struct kura_server *srv, role_state *out);

/* A check before every acknowledgement (automatic failover's lease
 * deadline): while gate(arg) returns false, local changes are refused
 * (as on a replica) and -syncrepl's waits end unacknowledged.  Called on
 * workers and the committer, with no lock held: cheap, never blocking.
 * Set once per process (KURA_EINVAL on a second call). */
int repl_role_set_gate(struct kura_server *srv, bool (*gate)(void *arg), void *arg);

/* Clears the persisted role (kuractl repl reset): the term stays, the
 * role keeps running as it is, and at the next start the command line
 * (-mhost/-mport, or none) decides again.  KURA_OK with "OK ..." in msg. */
int repl_role_reset(struct kura_server *srv, char *msg, size_t msglen);

#endif
