/* cmd/mha-train.c: placeholder */
int main(void) { return 2; }
