/* C functions of the op library for Python (tf_ps_ops/_library.py): the calls that are not
 * TF ops, because they run before any graph exists (init) or outside one, and must not
 * start TensorFlow's runtime (a Horovod script picks its GPU after init()).
 *
 * The one declaration of these functions: the compiler checks c_api.cc against it, and
 * _library.py reads it to give ctypes their signatures. So keep to the types _library.py
 * knows: int, void, unsigned long long, const char*, char*.
 */
#ifndef TFPS_CC_ENGINE_C_API_H_
#define TFPS_CC_ENGINE_C_API_H_

#ifdef __cplusplus
extern "C" {
#endif

/* 0 on success; otherwise the status code, with the message in `err`. */
int tfps_init(const char* scheduler_host, int scheduler_port, int rank, int size,
              int num_servers, char* err, int err_len);
void tfps_shutdown(void);
/* hvd.join(): blocks until every worker has joined (a dead worker fails it; a live one only
   after TFPS_STALL_SHUTDOWN, if set); returns the last rank to join, or minus the error code with `err` filled in. */
int tfps_join(char* err, int err_len);
int tfps_hierarchical(void); /* 1: hierarchical aggregation is on (TFPS_HIERARCHICAL) */
int tfps_is_initialized(void);
int tfps_rank(void);
int tfps_size(void);
int tfps_local_rank(void);
int tfps_local_size(void);
int tfps_num_servers(void);
/* The send queue's fusion threshold and scheduling credit while training runs
 * (TFPS_FUSION_BYTES, TFPS_SCHEDULING_CREDIT at start; the autotuner changes them). Set:
 * 0, or an error code with the message in err. Get: 0, or -1 when not initialised. */
int tfps_set_tuning(long long fusion_bytes, long long scheduling_credit, char* err,
                    int err_len);
int tfps_tuning(long long* fusion_bytes, long long* scheduling_credit);
/* The cycle time in microseconds (TFPS_CYCLE_US at start): how long a fusion batch may
 * wait for more partitions. Set: 0, or an error code with the message in err. Get: the
 * value, or -1 when not initialised. */
int tfps_set_cycle_us(long long cycle_us, char* err, int err_len);
long long tfps_cycle_us(void);
/* Payload bytes since init, for tests and benchmarks. */
unsigned long long tfps_bytes_sent(void);
unsigned long long tfps_bytes_received(void);
unsigned long long tfps_peer_bytes_sent(void);
unsigned long long tfps_peer_bytes_received(void);
/* Messages this worker sent to the servers since init (a fusion batch counts once), and
 * the partitions in them. */
unsigned long long tfps_messages_sent(void);
unsigned long long tfps_parts_sent(void);
/* Compression (docs/compression.md): float32 bytes the compressed pushes stood for, their
 * encoded bytes, and microseconds the engine thread spent encoding and decoding. */
unsigned long long tfps_codec_raw_bytes(void);
unsigned long long tfps_codec_encoded_bytes(void);
unsigned long long tfps_codec_micros(void);
/* The metrics (docs/metrics.md) in the Prometheus text format: copies at most out_len - 1
 * bytes and a NUL into `out`, returns the text's whole length (call again with more room
 * when it is not below out_len). Works before init() too (every counter 0). */
int tfps_metrics_text(char* out, int out_len);
/* The port this worker's metrics endpoint listens on (TFPS_METRICS_PORT), -1 when none. */
int tfps_metrics_port(void);
/* Horovod's start_timeline / stop_timeline (engine/timeline_control.h): 0 on success;
 * otherwise the status code, with the message in `err`. */
int tfps_start_timeline(const char* path, int mark_cycles, char* err, int err_len);
int tfps_stop_timeline(char* err, int err_len);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* TFPS_CC_ENGINE_C_API_H_ */
