/* C functions of the op library's kernels layer for Python (tf_ps_ops/_library.py): facts
 * the C++ side owns and Python must not restate. Same rules as cc/engine/c_api.h: the
 * compiler checks c_api.cc against it and Python reads it.
 */
#ifndef TFPS_KERNELS_C_API_H_
#define TFPS_KERNELS_C_API_H_

#ifdef __cplusplus
extern "C" {
#endif

/* The graph rewrite's table (ps_op_table.cc): one "TensorFlowOp PsOp" pair per line. */
const char* tfps_ps_swap_table(void);
/* The prefix of PS-mode keys ("ps:"): a variable's key is it + the variable's name. */
const char* tfps_ps_key_prefix(void);
/* How many slots the server keeps for optimizer code `optimizer` (0: none or unknown). */
int tfps_ps_optimizer_slots(int optimizer);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* TFPS_KERNELS_C_API_H_ */
