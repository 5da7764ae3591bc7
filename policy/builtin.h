/* The policies built into libspecd, one file each; the registry lists them. */
#ifndef SPECD_POLICY_BUILTIN_H
#define SPECD_POLICY_BUILTIN_H

#include "policy/options.h"
#include "specd/policy.h"

extern const specd_policy_ops specd_policy_none;
extern const specd_policy_ops specd_policy_ngram;
extern const specd_policy_ops specd_policy_suffix;
extern const specd_policy_ops specd_policy_draft;
extern const specd_policy_ops specd_policy_layerskip;
extern const specd_policy_ops specd_policy_remote;
extern const specd_policy_ops specd_policy_isd;
extern const specd_policy_ops specd_policy_risd;
extern const specd_policy_ops specd_policy_mrp;
extern const specd_policy_ops specd_policy_wedlm;
extern const specd_policy_ops specd_policy_sdar;
extern const specd_policy_ops specd_policy_simsd;
extern const specd_policy_ops specd_policy_recycle;

/* Their option tables. */
extern const specd_option_table specd_none_options;
extern const specd_option_table specd_ngram_options;
extern const specd_option_table specd_suffix_options;
extern const specd_option_table specd_draft_options;
extern const specd_option_table specd_layerskip_options;
extern const specd_option_table specd_remote_options;
extern const specd_option_table specd_isd_options;
extern const specd_option_table specd_risd_options;
extern const specd_option_table specd_mrp_options;
extern const specd_option_table specd_wedlm_options;
extern const specd_option_table specd_sdar_options;
extern const specd_option_table specd_simsd_options;
extern const specd_option_table specd_recycle_options;

#endif
