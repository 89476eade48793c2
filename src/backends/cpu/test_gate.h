/* A test hook: the TEST_GATE kernel blocks until the gate is open, so a
 * test can hold an execution in flight without timers. */
#ifndef LZ_TEST_GATE_H
#define LZ_TEST_GATE_H

void lz_test_gate_close(void);
void lz_test_gate_open(void);
/* 1 while a TEST_GATE kernel is blocked on the closed gate. */
int  lz_test_gate_waiting(void);

#endif
