#!/usr/bin/env bash
# uvflow's pipelines/ms_clean_image.yaml against WSClean 3 with the same settings on the same
# Measurement Set (docs/deconvolution.md: what matches), timed side by side, alternating, REPEATS
# times each (default 3). The MS: pipelines/simulate_to_ms.yaml, the small preset (783,360
# visibilities per channel), CHANNELS channels (default 1), five point sources on pixel centres, 1 Jy
# of noise per visibility. Writes bench/results/clean_vs_wsclean.md (date, machine, commit, wall
# times, restored peaks and beams). Usage: bench/clean_vs_wsclean.sh [uvflow binary]
set -euo pipefail
cd "$(dirname "$0")/.."
uvflow=${1:-build/uvflow}
repeats=${REPEATS:-3}
channels=${CHANNELS:-1}
command -v wsclean >/dev/null || { echo "wsclean is not installed (scripts/install-deps.sh --tests)" >&2; exit 1; }
work=out/clean_vs_wsclean
rm -rf "$work" && mkdir -p "$work"
# pipelines/clean_image_gpu.yaml's sky: pixels (216, 281), (316, 226), (266, 346), (136, 156), (406, 396).
sky='[{l_deg: 1.111111111111, m_deg: 0.694444444444, flux_jy: 3.0}, {l_deg: -1.666666666667, m_deg: -0.833333333333, flux_jy: 2.0},
  {l_deg: -0.277777777778, m_deg: 2.5, flux_jy: 1.0}, {l_deg: 3.333333333333, m_deg: -2.777777777778, flux_jy: 0.5},
  {l_deg: -4.166666666667, m_deg: 3.888888888889, flux_jy: 1.5}]'
"$uvflow" run --no-progress pipelines/simulate_to_ms.yaml --set vis.preset=small --set vis.channels="$channels" \
  --set vis.noise_jy=1.0 --set "vis.sky=$sky" --set ms.path="$work/sim.ms" >"$work/simulate.log" 2>&1
threshold=0.01
now() { date +%s.%N; }
for i in $(seq 1 "$repeats"); do
  t0=$(now)
  "$uvflow" run --no-progress pipelines/ms_clean_image.yaml --set vars.ms="$work/sim.ms" --set vars.npix=512 \
    --set vars.psf_npix=1024 --set vars.cell_arcsec=100 --set vars.weighting=briggs --set vars.robust=0 \
    --set vars.gain=0.1 --set vars.major_gain=0.8 --set vars.threshold=$threshold --set vars.threshold_sigma=0 \
    --set vars.max_cycles=20 --set vars.beam_fit=wsclean --set fits.path="$work/uvflow-image.fits" \
    --set model_fits.path="$work/uvflow-model.fits" --set residual_fits.path="$work/uvflow-residual.fits" \
    --set psf_fits.path="$work/uvflow-psf.fits" --set png.path="$work/uvflow.png" \
    --set run.report="$work/uvflow.report.json" >"$work/uvflow.log" 2>&1
  t1=$(now)
  wsclean -j 2 -size 512 512 -scale 100asec -weight briggs 0 -niter 100000 -gain 0.1 -mgain 0.8 \
    -threshold $threshold -nmiter 20 -use-wgridder -no-small-inversion -name "$work/wsclean" "$work/sim.ms" \
    >"$work/wsclean.log" 2>&1
  t2=$(now)
  echo "$i $(echo "$t1 - $t0" | bc) $(echo "$t2 - $t1" | bc)" | tee -a "$work/times.txt"
done
/usr/bin/python3 bench/report_clean_vs_wsclean.py "$work" "$channels" >bench/results/clean_vs_wsclean.md
cat bench/results/clean_vs_wsclean.md
