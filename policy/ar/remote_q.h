/* The `remote` policy's counts of its draft distributions left on the device (specd-drafter
 * --q-device cuda[:N]), for tests. The session reaches the rows themselves through the policy
 * ABI (specd_policy_ops.device_q / fetch_q), as it would any policy's. Not public API. */
#ifndef SPECD_POLICY_AR_REMOTE_Q_H
#define SPECD_POLICY_AR_REMOTE_Q_H

#include <stdint.h>

/* In this process so far: proposals whose q stayed on the device, and fetches of such rows to
 * the host (tests show which path ran). */
uint64_t specd_remote_q_device_count(void);
uint64_t specd_remote_q_fetch_count(void);

#endif
