export { Autoscaler, type AutoscalerDeps, type LoadPlan, type ModelReplicasView } from './autoscaler.js';
