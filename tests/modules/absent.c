/* A library the module of FAKE_MISSING needs and the loader cannot find. */
extern const int ferry_test_absent;
const int ferry_test_absent = 1;
