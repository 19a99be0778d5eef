/* zeroshard/zeroshard.h: everything a trainer needs (MPI- and NCCL-typed
 * constructors live in zeroshard/mpi.h and zeroshard/nccl.h). */
#ifndef ZEROSHARD_ZEROSHARD_H
#define ZEROSHARD_ZEROSHARD_H

#include "zeroshard/checkpoint.h"
#include "zeroshard/comm.h"
#include "zeroshard/config.h"
#include "zeroshard/config_load.h"
#include "zeroshard/device.h"
#include "zeroshard/engine.h"
#include "zeroshard/log.h"
#include "zeroshard/memory.h"
#include "zeroshard/mesh.h"
#include "zeroshard/moe.h"
#include "zeroshard/pipeline.h"
#include "zeroshard/ps.h"
#include "zeroshard/status.h"
#include "zeroshard/tp.h"
#include "zeroshard/trace.h"
#include "zeroshard/types.h"

#endif
