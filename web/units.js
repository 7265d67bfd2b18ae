// Quantities as a person reads them, shared by the gallery and the mesh view.

/** Energy: `0.8 Wh`, `12 Wh`, `3.4 mWh`. */
export function watthours(wh) {
  return wh >= 0.1 ? `${wh.toFixed(wh >= 10 ? 0 : 1)} Wh` : `${(wh * 1000).toPrecision(2)} mWh`;
}
