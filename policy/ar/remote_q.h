/* The `remote` policy's draft distributions where the drafter left them on the device
 * (specd-drafter --q-device cuda[:N]): for the session, which verifies on the device from there
 * and fetches them to the host only where a host reader needs them. Not public API. */
#ifndef SPECD_POLICY_AR_REMOTE_Q_H
#define SPECD_POLICY_AR_REMOTE_Q_H

#include <stdint.h>

#include "specd/policy.h"
#include "specd/status.h"

/* The last proposal's q rows on the CUDA device (the proposal's n_draft rows of n_vocab floats,
 * not checked yet), or NULL: another policy, no q, or q delivered into the host q as usual.
 * Valid until the policy's next propose or its destruction. */
const float *specd_remote_q_device(const specd_policy_ops *ops, const void *state);

/* Copies those rows to the host q (room for max_draft rows) and checks them as host rows are
 * checked (specd_ipc_client_fetch_q): an error means q is unusable and the drafts must go. */
specd_status specd_remote_q_fetch(const specd_policy_ops *ops, void *state, float *q,
                                  specd_error *err);

/* In this process so far: proposals whose q stayed on the device, and fetches of such rows to
 * the host (tests show which path ran). */
uint64_t specd_remote_q_device_count(void);
uint64_t specd_remote_q_fetch_count(void);

#endif
