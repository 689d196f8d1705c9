/*
 * Helpers for the loops that wait on progress.
 */
#ifndef RT_PROGRESS_H
#define RT_PROGRESS_H

/* For waiting loops: after a run of idle polls, give the core away, so that
 * more ranks than cores still make progress. Reset *idle when work was done. */
void rt_idle(unsigned *idle);

#endif /* RT_PROGRESS_H */
