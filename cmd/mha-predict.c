/* cmd/mha-predict.c: placeholder */
int main(void) { return 2; }
