/* CPU time of decoding a JPEG whole against decoding only a RandomResizedCrop box of it (libjpeg-turbo's
 * jpeg_crop_scanline + jpeg_skip_scanlines, stopping below the box): how much a region-of-interest decoder
 * would save the `tensor` decoder's training path (runner/aiperf_runner/train/decode.py).
 *
 * The boxes are drawn as torchvision's RandomResizedCrop draws them (scale 0.08-1, log-uniform ratio 3/4-4/3,
 * ten tries, else the whole image), from a fixed seed. Each file's bytes are read once; 3 rounds; the
 * process's CPU time. Needs libjpeg62-turbo-dev (Debian) and a C compiler:
 *
 *     gcc -O2 bench/jpeg_roi.c -o /tmp/jpeg_roi -ljpeg -lm && taskset -c 1 /tmp/jpeg_roi DIR/ *.jpg
 *
 * (bench/data_path.py's generated files: run it once with --images N and keep them, or any JPEG tree.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <jpeglib.h>

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double uniform(void) { return rand() / (double)RAND_MAX; }

/* (top, left, h, w) of RandomResizedCrop for a width x height image. */
static void crop_box(int width, int height, int *top, int *left, int *h, int *w) {
    for (int i = 0; i < 10; i++) {
        double area = width * height * (0.08 + 0.92 * uniform());
        double ratio = exp(log(3.0 / 4) + (log(4.0 / 3) - log(3.0 / 4)) * uniform());
        *w = (int)round(sqrt(area * ratio));
        *h = (int)round(sqrt(area / ratio));
        if (*w > 0 && *w <= width && *h > 0 && *h <= height) {
            *top = rand() % (height - *h + 1);
            *left = rand() % (width - *w + 1);
            return;
        }
    }
    *top = 0, *left = 0, *h = height, *w = width;
}

/* Decode `data` to RGB rows in `out`: the whole image, or (box) only the rows and columns of a crop box. */
static void decode(const unsigned char *data, unsigned long size, int box, unsigned char *out) {
    struct jpeg_decompress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_decompress(&c);
    jpeg_mem_src(&c, data, size);
    jpeg_read_header(&c, TRUE);
    c.out_color_space = JCS_RGB;
    jpeg_start_decompress(&c);
    JDIMENSION first = 0, last = c.output_height, row_width = c.output_width;
    if (box) {
        int top, left, h, w;
        crop_box(c.output_width, c.output_height, &top, &left, &h, &w);
        JDIMENSION x = left, width = w;
        jpeg_crop_scanline(&c, &x, &width); /* widened to whole iMCUs */
        if (top) jpeg_skip_scanlines(&c, top);
        first = top, last = top + h, row_width = width;
    }
    while (c.output_scanline < last) {
        JSAMPROW row = out + (c.output_scanline - first) * row_width * 3;
        jpeg_read_scanlines(&c, &row, 1);
    }
    jpeg_abort_decompress(&c); /* the rows below a box are never decoded */
    jpeg_destroy_decompress(&c);
}

int main(int argc, char **argv) {
    int n = argc - 1;
    if (n < 1) {
        fprintf(stderr, "usage: %s FILE.jpg...\n", argv[0]);
        return 2;
    }
    unsigned char **data = malloc(n * sizeof *data);
    unsigned long *size = malloc(n * sizeof *size);
    for (int i = 0; i < n; i++) {
        FILE *f = fopen(argv[i + 1], "rb");
        if (!f) { perror(argv[i + 1]); return 1; }
        fseek(f, 0, SEEK_END);
        size[i] = ftell(f);
        rewind(f);
        data[i] = malloc(size[i]);
        if (fread(data[i], 1, size[i], f) != size[i]) { perror(argv[i + 1]); return 1; }
        fclose(f);
    }
    unsigned char *out = malloc(8192 * 8192 * 3);
    printf("%d files; ms of CPU per image\n", n);
    for (int round = 1; round <= 3; round++) {
        srand(1);
        double t0 = cpu_seconds();
        for (int i = 0; i < n; i++) decode(data[i], size[i], 0, out);
        double t1 = cpu_seconds();
        for (int i = 0; i < n; i++) decode(data[i], size[i], 1, out);
        double t2 = cpu_seconds();
        printf("round %d: whole %.3f ms, crop box only %.3f ms: %.2fx\n", round, (t1 - t0) / n * 1e3,
               (t2 - t1) / n * 1e3, (t1 - t0) / (t2 - t1));
    }
    return 0;
}
