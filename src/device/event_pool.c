/* Spare events for reuse (device_impl.h says who uses them and why). */
#include <stdlib.h>

#include "device/device_impl.h"

void zs__event_pool_init(zs__event_pool_t *p, zs_device_t *dev, int first_cap) {
  p->dev = dev;
  pthread_mutex_init(&p->mu, NULL);
  p->ev = NULL;
  p->n = p->cap = 0;
  p->first_cap = first_cap > 0 ? first_cap : 8;
}

zs_event_t *zs__event_pool_get(zs__event_pool_t *p) {
  zs_event_t *ev = NULL;
  pthread_mutex_lock(&p->mu);
  if (p->n) ev = p->ev[--p->n];
  pthread_mutex_unlock(&p->mu);
  if (!ev && zs_event_create(p->dev, &ev) != ZS_OK) ev = NULL;
  return ev;
}

void zs__event_pool_put(zs__event_pool_t *p, zs_event_t *ev) {
  if (!ev) return;
  pthread_mutex_lock(&p->mu);
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : p->first_cap;
    zs_event_t **n = realloc(p->ev, (size_t)cap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&p->mu);
      zs_event_destroy(p->dev, ev);
      return;
    }
    p->ev = n;
    p->cap = cap;
  }
  p->ev[p->n++] = ev;
  pthread_mutex_unlock(&p->mu);
}

void zs__event_pool_destroy(zs__event_pool_t *p) {
  for (int i = 0; i < p->n; i++) zs_event_destroy(p->dev, p->ev[i]);
  free(p->ev);
  p->ev = NULL;
  p->n = p->cap = 0;
  pthread_mutex_destroy(&p->mu);
}
