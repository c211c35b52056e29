// The built-in `english` analyzer that the integ-test-zip distribution of Elasticsearch leaves out (it lives in
// the analysis-common module, which that distribution does not ship): index configs with `store.analyzer:
// english` name it in their mapping. Every full distribution (tar.gz, Docker, Elastic Cloud) has it already.
// scripts/elasticsearch.sh (install_english_analysis) compiles this file with javac against the cached
// distribution's lib/ and installs it as the module `icr2-analysis-english`. The analyzer is Lucene's
// EnglishAnalyzer (standard tokenizer, English possessives, lower case, English stop words, Porter stemmer),
// which is what analysis-common's `english` analyzer is with no options given.
package org.icr2.analysis;

import java.util.List;

import org.apache.lucene.analysis.en.EnglishAnalyzer;
import org.elasticsearch.index.analysis.PreBuiltAnalyzerProviderFactory;
import org.elasticsearch.indices.analysis.PreBuiltCacheFactory;
import org.elasticsearch.plugins.AnalysisPlugin;
import org.elasticsearch.plugins.Plugin;

/** Registers `english` as a pre-built analyzer, as the analysis-common module does. */
public class EnglishAnalysisPlugin extends Plugin implements AnalysisPlugin {
    @Override
    public List<PreBuiltAnalyzerProviderFactory> getPreBuiltAnalyzerProviderFactories() {
        return List.of(new PreBuiltAnalyzerProviderFactory("english", PreBuiltCacheFactory.CachingStrategy.ONE, EnglishAnalyzer::new));
    }
}
