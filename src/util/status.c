/*
 * status.c - kura_strerror: a phrase for every status code (status.h).
 */
#include "kura/status.h"

const char *kura_strerror(int rc)
{
    switch (rc) {
    case KURA_OK:        return "ok";
    case KURA_NOTFOUND:  return "not found";
    case KURA_EXISTS:    return "exists";
    case KURA_EXPIRED:   return "expired";
    case KURA_FLUSHED:   return "flushed";
    case KURA_ENOMEM:    return "out of memory";
    case KURA_ETOOBIG:   return "object too large";
    case KURA_EIO:       return "I/O error";
    case KURA_ENOSPC:    return "no space left on device";
    case KURA_ECORRUPT:  return "data corrupted";
    case KURA_EINVAL:    return "invalid argument";
    case KURA_EREADONLY: return "store is read-only";
    case KURA_ESYS:      return "system error";
    case KURA_EFAILED:   return "writes stopped after a failed sync (restart to recover)";
    case KURA_EREPLICA:  return "this server is a read-only replica (write to its master)";
    }
    return "unknown error";
}
