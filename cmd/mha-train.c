/* cmd/mha-train.c: command line of the trainer: arguments, config, exit codes.
 * Exit status: 0 success, 1 runtime or data error, 2 usage error, 130 interrupted
 * (after saving last.mha). */
#include "data/error.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/trainer.h"
#include "version.h"
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: mha-train --config FILE [--set key=value ...] [--overwrite] [--max-steps N] [--quiet] [--profile]\n"
            "       mha-train --resume OUTPUT_DIR/last.mha [--set train.device=...] [--max-steps N] [--quiet] [--profile]\n"
            "\n"
            "Trains a Transformer text classifier described by a JSON config (sections data,\n"
            "model, train, output; see configs/demo.json). Writes OUTPUT_DIR/model.mha (best on\n"
            "dev), OUTPUT_DIR/last.mha (resumable state) and OUTPUT_DIR/metrics.jsonl.\n"
            "\n"
            "  --config FILE      JSON config; paths inside are relative to its folder (read\n"
            "                     from a pipe, as <(...): to the working directory)\n"
            "  --set key=value    override a config key, e.g. --set train.lr=3e-4 (repeatable);\n"
            "                     paths are relative to the working directory\n"
            "  --overwrite        start over in an output.dir that holds a run (else refused)\n"
            "  --resume FILE      continue a run from its last.mha, in the folder that holds it\n"
            "                     (a run folder stands for its last.mha); --set then takes only\n"
            "                     train.device, train.threads and train.max_bad_steps\n"
            "  --max-steps N      stop after N updates in total, saving last.mha (the learning-rate\n"
            "                     schedule still spans train.epochs; --resume goes on)\n"
            "  --quiet            no resolved config and no progress lines\n"
            "  --profile          time every op family; print a table and GFLOP/s at the end\n"
            "  -h, --help         this text, then every config key\n"
            "  --version          the version and the commit it was built from\n"
            "Options that take a value also take it as --name=value.\n"
            "\n");
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mha-train: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(run mha-train --help for usage)\n");
    va_end(ap);
    return MHA_EXIT_USAGE;
}

/* Every option: the first N_VALUE_OPTIONS take a value, the rest are flags. */
static const char *const OPTIONS[] = {"--config", "--set", "--resume", "--max-steps",
                                      "--quiet", "--overwrite", "--profile", "--help", "--version"};
#define N_VALUE_OPTIONS 4
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof *OPTIONS))
/* Index of name in OPTIONS, or -1. */
#define option_index(name) mha_name_index(name, OPTIONS, N_OPTIONS)

static int unknown_option(const char *arg) {
    if (arg[0] != '-') return usage_error("unexpected argument '%s' (a config file is given as --config %s)", arg, arg);
    char name[64];
    size_t len = strcspn(arg, "=");
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, arg, len);
    name[len] = '\0';
    if (strchr(arg, '=') && option_index(name) >= N_VALUE_OPTIONS)
        return usage_error("%s takes no value (got '%s'; give %s alone)", name, arg, name);
    const char *near = mha_did_you_mean(name, OPTIONS, N_OPTIONS);
    if (near) return usage_error("unknown argument '%s' (did you mean '%s'?)", arg, near);
    if (arg[0] == '-' && arg[1] != '-') return usage_error("unknown argument '%s' (options are spelled --name)", arg);
    return usage_error("unknown argument '%s'", arg);
}

int main(int argc, char **argv) {
    mha_guard_std_fds();
    mha_cpu_set_thread_wait(argv);
    /* `mha-train ... 2>&1 | tee log` with tee gone: writes fail (EPIPE) and training goes on to
     * save; over `ulimit -f`: the write fails and is reported ("File too large") */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
    const char *config_path = NULL;
    const char **sets = calloc((size_t)argc, sizeof *sets);
    int n_sets = 0;
    TrainOptions opt = {.version = MHA_VERSION};
    unsigned given = 0;   /* bit k: value option OPTIONS[k] was given (--set may repeat) */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq_value = NULL, *eq = strchr(a, '=');
        char name[64];
        if (!strncmp(a, "--", 2) && eq && (size_t)(eq - a) < sizeof name) {
            /* --name=value: the same as --name value, for the options that take one */
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = '\0';
            eq_value = eq + 1;
            a = name;
            int k = option_index(a);
            if (k < 0 || k >= N_VALUE_OPTIONS) { free(sets); return unknown_option(argv[i]); }
            if (!*eq_value) { free(sets); return usage_error("%s needs a value after '=' (got '%s')", a, argv[i]); }
        }
        int has_value = eq_value || i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            config_print_help(stdout);
            free(sets);
            return 0;
        }
        else if (!strcmp(a, "--version")) {
            printf("mha-train %s\n", MHA_VERSION);
            free(sets);
            return 0;
        }
        else if (!strcmp(a, "--quiet")) opt.quiet = 1;
        else if (!strcmp(a, "--overwrite")) opt.overwrite = 1;
        else if (!strcmp(a, "--profile")) opt.profile = 1;
        else if (option_index(a) >= 0 && option_index(a) < N_VALUE_OPTIONS) {
            if (!has_value) { free(sets); return usage_error("%s needs a value", a); }
            const char *v = eq_value ? eq_value : argv[++i];
            if (!*v) { free(sets); return usage_error("%s needs a value (got an empty one)", a); }   /* --config "" */
            const int k = option_index(a);
            if (strcmp(a, "--set") && (given & (1u << k))) { free(sets); return usage_error("%s is given twice; give it once", a); }
            given |= 1u << k;
            if (!strcmp(a, "--config")) config_path = v;
            else if (!strcmp(a, "--set")) sets[n_sets++] = v;
            else if (!strcmp(a, "--resume")) opt.resume_path = v;
            else {
                char *end;
                opt.max_steps = strtol(v, &end, 10);
                if (*end || opt.max_steps <= 0) { free(sets); return usage_error("--max-steps '%s': expected a positive integer", v); }
            }
        } else {
            free(sets);
            return unknown_option(a);
        }
    }
    if (!config_path && !opt.resume_path) { free(sets); return usage_error("%s", "missing --config FILE"); }
    if (opt.resume_path && opt.overwrite) {
        free(sets);
        return usage_error("%s", "--overwrite starts a new run; --resume continues one: use one of them");
    }
    if (opt.resume_path && config_path) {
        free(sets);
        return usage_error("%s", "--resume continues with the config stored in the checkpoint; "
                           "do not combine it with --config (--set takes train.device, train.threads "
                           "and train.max_bad_steps with --resume)");
    }
    if (opt.resume_path) {   /* onto the stored config, the keys that do not change the run's math */
        opt.resume_sets = sets;
        opt.n_resume_sets = n_sets;
    }
    char resume_in_dir[4200];
    struct stat st;
    if (opt.resume_path && stat(opt.resume_path, &st) == 0 && S_ISDIR(st.st_mode)) {   /* --resume RUN_DIR */
        snprintf(resume_in_dir, sizeof resume_in_dir, "%s%slast.mha", opt.resume_path,
                 opt.resume_path[strlen(opt.resume_path) - 1] == '/' ? "" : "/");
        if (stat(resume_in_dir, &st) != 0) {
            fprintf(stderr, "mha-train: error: %s: a folder without a last.mha (--resume takes a run's "
                    "last.mha, or the folder that holds it)\n", opt.resume_path);
            free(sets);
            return MHA_EXIT_DATA;
        }
        opt.resume_path = resume_in_dir;
    }
    Config cfg;
    MhaError err = {0};
    config_defaults(&cfg);
    int rc = 0;
    if (config_path) rc = config_load(&cfg, config_path, sets, n_sets, &err);
    if (rc == 0) rc = train_run(&cfg, &opt, &err);
    free(sets);
    errno = 0;
    if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout)))   /* e.g. a full disk: say so, exit 1 */
        rc = mha_fail(&err, MHA_EXIT_DATA, "cannot write the report to standard output (%s)", strerror(errno ? errno : EIO));
    if (rc != 0 && rc != 130) fprintf(stderr, "mha-train: error: %s\n", err.msg);
    return rc;
}
