/* train_device.h: zs-train-gpt's device and comm (train_device.c): the cpu
 * device with an MPI comm, or with --device cuda a GPU per rank with a NCCL
 * comm, in a build that has both. */
#ifndef ZS_EXAMPLES_GPT_TRAIN_DEVICE_H
#define ZS_EXAMPLES_GPT_TRAIN_DEVICE_H

#include "opts.h"
#include "zeroshard/comm.h"
#include "zeroshard/device.h"

/* Opens what o->device_cuda asks for; on failure says why on stderr, leaves
 * nothing open and returns the status (ZS_ERR_UNSUPPORTED: not in this build
 * or on this machine). *we_init: MPI was initialised here (train_device_close
 * finalizes it). */
zs_status_t train_device_open(const gpt_opts_t *o, zs_device_t **dev, zs_comm_t **comm, int *we_init);
void train_device_close(zs_device_t *dev, zs_comm_t *comm, int we_init);

#endif
